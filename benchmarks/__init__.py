"""Benchmark loaders: raw dataset files → ``allmem.types.Dialogue``.

The runner calls ``load_dataset(cfg.dataset)``; the config names the loader (``_target_``) so adding a benchmark
means adding a loader and a ``configs/dataset/<name>.yaml``, nothing else. Loaders are imported on use, so
importing this package stays cheap.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from allmem.errors import ConfigError
from allmem.files import plain
from allmem.paths import config_dir, resolve_data_path
from allmem.types import Dialogue
from benchmarks.errors import DatasetError

__all__ = ["DatasetError", "fit_split", "load_dataset"]

# Keys of configs/dataset/*.yaml that load_dataset consumes; every other key is passed to the loader.
_HARNESS_KEYS = (
    "name", "_target_", "path", "limit_dialogues", "limit_sessions", "limit_questions", "fit_dialogues",
    "sample", "sample_seed", "sample_dialogues",  # benchmarks/sampling.py
)  # fmt: skip


def _import(target: str) -> Callable[..., list[Dialogue]]:
    module_name, _, attr = target.rpartition(".")
    if not module_name:
        raise ValueError(f"dataset _target_ must be 'module.function', got {target!r}")
    fn = getattr(importlib.import_module(module_name), attr, None)
    if not callable(fn):
        raise ValueError(f"dataset _target_ {target!r} is not a callable")
    return fn


def _limit(cfg: Mapping[str, Any], key: str) -> int | None:
    """``dataset.limit_*``: null or a count. -1, 1.5 or true would slice the data silently (``[:-1]`` drops the
    last dialogue), so they are refused in one line; ``allmem.run.preflight`` checks them before the run exists."""
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"dataset.{key}: must be null or a non-negative integer, got {value!r}")
    return value


# The count limits of a dataset config, in the order load_dataset applies them.
LIMITS = ("limit_dialogues", "limit_sessions", "limit_questions")


def _first_sessions(dialogue: Dialogue, n: int) -> Dialogue:
    """The first ``n`` sessions (chronological, as the loader orders them) and only the questions whose gold
    evidence lies wholly in them: a question whose evidence is missing or reaches a later session could not be
    answered from the slice, so it is left out rather than scored against turns the memory never saw. A dialogue
    of ``n`` sessions or fewer is kept whole."""
    if n >= len(dialogue.sessions):
        return dialogue
    sessions = dialogue.sessions[:n]
    kept = {s.id for s in sessions} | {t.id for s in sessions for t in s.turns}
    questions = tuple(
        q for q in dialogue.questions if q.evidence and set(q.evidence) | set(q.evidence_turns) <= kept
    )
    return dataclasses.replace(dialogue, sessions=sessions, questions=questions)


def check_limits(cfg: Any) -> None:
    """Raise ``ConfigError`` naming the key when a ``dataset.limit_*`` value cannot be a count."""
    from benchmarks import sampling

    conf = plain(cfg)
    for key in LIMITS:
        _limit(conf, key)
    sampling.check(conf)


def load_dataset(cfg: Any) -> list[Dialogue]:
    """Dialogues for a dataset config (``configs/dataset/*.yaml``), limits applied.

    Resolves ``path`` (``allmem.paths.resolve_data_path``), calls ``_target_`` with the path and the remaining
    keys (e.g. ``repair_evidence``), then keeps the first ``limit_dialogues`` dialogues, the first
    ``limit_sessions`` sessions of each with the questions their evidence answers (``_first_sessions``), and the
    first ``limit_questions`` questions of each: cheap runs with the real data and the real code path. Then the
    seeded draws of ``sample_dialogues`` dialogues and ``sample`` questions (``benchmarks/sampling.py``).
    """
    conf = plain(cfg)
    missing = [k for k in ("name", "_target_") if not conf.get(k)]
    if missing:
        raise ValueError(f"dataset config lacks {', '.join(missing)}")
    limit_d, limit_s, limit_q = (_limit(conf, key) for key in LIMITS)
    loader = _import(str(conf["_target_"]))
    path = resolve_data_path(str(conf["name"]), conf.get("path"))
    kwargs = {k: v for k, v in conf.items() if k not in _HARNESS_KEYS}
    if limit_d is not None and "limit" in inspect.signature(loader).parameters:
        kwargs["limit"] = limit_d  # a streaming loader stops reading there (LongMemEval-M is several GB)
    dialogues = loader(path, **kwargs)
    if limit_d is not None:
        dialogues = dialogues[:limit_d]
    if limit_s is not None:
        dialogues = [_first_sessions(d, limit_s) for d in dialogues]
    if limit_q is not None:
        dialogues = [dataclasses.replace(d, questions=d.questions[:limit_q]) for d in dialogues]
    from benchmarks import sampling

    return sampling.apply(dialogues, conf)  # dataset.sample_dialogues, dataset.sample (stratified draws)


def fit_split(dataset: str = "locomo") -> tuple[str, ...]:
    """The dialogues constants may be fitted on (``fit_dialogues`` of ``configs/dataset/<dataset>.yaml``).

    The one home of the fit / held-out split: the report, the fitting scripts and the tests read it from there.
    An empty tuple means nothing of that dataset is fitted on.
    """
    from omegaconf import OmegaConf

    path = config_dir() / "dataset" / f"{dataset}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no dataset config {path}")
    ids = OmegaConf.load(path).get("fit_dialogues") or ()
    return tuple(str(x) for x in ids)
