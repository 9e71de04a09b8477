"""Reproducible subsets: ``dataset.sample`` questions stratified by group, ``dataset.sample_dialogues`` dialogues.

``dataset.sample=N`` with ``dataset.sample_seed=S`` draws N questions instead of the first N: each group (LoCoMo
category, LongMemEval question type) gets its share of N by the largest-remainder rule (so every group's count is
within one question of N × its share of the full set), and the questions of a group are drawn with a generator
seeded by S and the group's name. The draw depends on the questions' ids and order, the seed and N, nothing else
(not the process, the hash seed or the worker count). Questions keep their dataset order.

Sampling questions does not save ingestion: a LoCoMo conversation holds about 200 questions, so any sample of
more than a handful keeps every conversation, and each must still be streamed whole. Only a dialogue left with
no question is dropped (LongMemEval: each question has its own haystack, so there it does save). To save
ingestion on LoCoMo, sample dialogues: ``dataset.sample_dialogues=M`` keeps M dialogues drawn with the same seed
(in dataset order), before any question sampling.

The chosen ids are recorded in ``metrics.json`` (``inputs.sample``: ids and their sha256); they are a function of
the data's bytes, the three keys and the sampling code, which the run's hash (data digest and config) and code
fingerprint already cover, so two runs with the same hash asked the same questions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from allmem.types import Dialogue

KEYS = ("sample", "sample_seed", "sample_dialogues")


def _count(conf: Mapping[str, Any], key: str) -> int | None:
    from allmem.errors import ConfigError

    value = conf.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"dataset.{key}: must be null or a positive integer, got {value!r}")
    return value


def check(conf: Mapping[str, Any]) -> tuple[int | None, int, int | None]:
    """(sample, seed, sample_dialogues) from a dataset config, each checked; errors name the key."""
    from allmem.errors import ConfigError

    seed = conf.get("sample_seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"dataset.sample_seed: must be an integer, got {seed!r}")
    return _count(conf, "sample"), seed, _count(conf, "sample_dialogues")


def quotas(sizes: Mapping[str, int], n: int) -> dict[str, int]:
    """Largest-remainder shares of ``n`` over groups of ``sizes``; ties go to the larger group, then the name."""
    total = sum(sizes.values())
    n = min(n, total)
    exact = {g: n * s / total for g, s in sizes.items()}
    out = {g: math.floor(x) for g, x in exact.items()}
    left = n - sum(out.values())
    for g in sorted(sizes, key=lambda g: (-(exact[g] - out[g]), -sizes[g], g))[:left]:
        out[g] += 1
    return out


def sample_dialogues(dialogues: Sequence[Dialogue], m: int, seed: int) -> list[Dialogue]:
    """``m`` dialogues drawn with ``seed``, in dataset order (all of them when ``m`` is not smaller)."""
    if m >= len(dialogues):
        return list(dialogues)
    keep = set(random.Random(f"dialogues:{seed}").sample(range(len(dialogues)), m))
    return [d for i, d in enumerate(dialogues) if i in keep]


def sample_questions(dialogues: Sequence[Dialogue], n: int, seed: int) -> list[Dialogue]:
    """``n`` questions stratified by group (``Question.group``), drawn with ``seed``; dialogues left with no
    question are dropped."""
    order = [(di, qi, q) for di, d in enumerate(dialogues) for qi, q in enumerate(d.questions)]
    groups: dict[str, list[tuple[int, int]]] = {}
    for di, qi, q in order:
        groups.setdefault(q.group, []).append((di, qi))
    share = quotas({g: len(v) for g, v in groups.items()}, n)
    chosen: set[tuple[int, int]] = set()
    for g in sorted(groups):
        chosen.update(random.Random(f"questions:{seed}:{g}").sample(groups[g], share[g]))
    out = []
    for di, d in enumerate(dialogues):
        kept = tuple(q for qi, q in enumerate(d.questions) if (di, qi) in chosen)
        if kept:
            out.append(dataclasses.replace(d, questions=kept))
    return out


def apply(dialogues: Sequence[Dialogue], conf: Mapping[str, Any]) -> list[Dialogue]:
    """The dialogues after ``sample_dialogues`` and then ``sample`` (each only when set)."""
    n, seed, m = check(conf)
    out = list(dialogues)
    if m is not None:
        out = sample_dialogues(out, m, seed)
    if n is not None:
        out = sample_questions(out, n, seed)
    return out


def record(dialogues: Sequence[Dialogue], conf: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``metrics.json`` keeps of a sample (None when nothing was sampled): the keys, the chosen dialogue and
    question ids, and the sha256 of the question ids."""
    n, seed, m = check(conf)
    if n is None and m is None:
        return None
    ids = [f"{d.id}/{q.id}" for d in dialogues for q in d.questions]
    return {
        "sample": n, "sample_seed": seed, "sample_dialogues": m,
        "dialogue_ids": [d.id for d in dialogues], "question_ids": ids,
        "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
    }  # fmt: skip
