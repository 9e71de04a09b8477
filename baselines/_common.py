"""What the five published baselines (Mem0, A-Mem, LightMem, HippoRAG 2, MemGPT) share.

- ``Tally``: the per-dialogue counters a system reports through ``stats()`` (events by type, skipped replies by
  reason), so a bad LLM reply is counted, never a crash and never a silent drop.
- ``ask``: one role call through the LLM layer; a failed or unparsable reply is tallied and returns None.
- ``VectorIndex``: a small exact cosine index over unit vectors with stable ids (add, replace, delete, top-k).
- Text rules the offline roles are built from: sentences, filler detection, first person → name, change cues,
  and a memoised keyword extractor (A-Mem and HippoRAG 2 read the same turns, and ``make reproduce`` runs every
  method in one process, so each turn's keywords are computed once).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from allmem.llm.base import ChatRequest
from allmem.llm.prompts import build_request
from allmem.llm.roles import RoleFailure, failure_of, run_role
from allmem.memory.fusion import top_positions
from allmem.systems import MemorySystem, Resources
from allmem.text import STOP_WORDS, words
from allmem.text.keywords import FILLERS, KeywordExtractor
from allmem.threads import single_thread_blas
from allmem.types import SessionInfo, Turn


class SessionWriter(MemorySystem):
    """A system that writes at each session's end (and the stream's): ``ingest`` queues turns in ``pending``
    (which ``reset`` empties), ``flush`` writes them."""

    pending: list[Turn]

    def ingest(self, turn: Turn) -> None:
        self.pending.append(turn)

    def end_session(self, session: SessionInfo) -> None:
        self.flush()

    def end_stream(self) -> None:
        self.flush()

    def checkpoint(self) -> None:
        self.flush()  # a mid-stream question: the queued turns are written first (allmem.systems)

    def flush(self) -> None:
        raise NotImplementedError


class Tally(Counter):
    """Event and failure counters; ``as_stats`` keeps only non-zero counts, keys sorted."""

    def as_stats(self) -> dict[str, int]:
        return {k: int(v) for k, v in sorted(self.items()) if v}


def llm_of(resources: Resources, temperature: float | None = None) -> Any:
    """The run's LLM, or the offline one when a system is built without (library use, unit tests).

    ``temperature`` (a method config's upstream sampling temperature) is set on every request the system sends
    through the returned object; None leaves the client's own (``llm.temperature``), so a config without the key
    sends exactly the requests it sent before."""
    if resources.llm is None:
        from allmem.llm import build_llm

        resources.llm = build_llm(
            {
                "_target_": "allmem.llm.offline.OfflineBackend",
                "backend": "offline",
                "cache": {"enabled": False},
            }
        )
    return resources.llm if temperature is None else AtTemperature(resources.llm, float(temperature))


class AtTemperature:
    """An LLM whose requests carry one temperature (unless a request sets its own); everything else is the
    wrapped LLM's (cache, ledger, backend)."""

    def __init__(self, llm: Any, temperature: float) -> None:
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.inner, self.temperature = llm, temperature

    def _set(self, req: ChatRequest) -> ChatRequest:
        return req if req.temperature is not None else dataclasses.replace(req, temperature=self.temperature)

    def chat(self, req: ChatRequest) -> Any:
        return self.inner.chat(self._set(req))

    def chat_many(self, requests: Sequence[ChatRequest]) -> list[Any]:
        return self.inner.chat_many([self._set(r) for r in requests])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def embedder_of(resources: Resources, owner: str) -> Any:
    if resources.embedder is None:
        raise ValueError(f"configs/method/{owner}.yaml: {owner} needs resources.embedder (configs/embedder)")
    return resources.embedder


def ask(
    llm: Any, template: str, variables: Mapping[str, Any], payload: Any, tally: Tally
) -> dict[str, Any] | None:
    """Call ``template``; return its schema-valid JSON object, or None with the failure counted.

    Counted as ``failed_<template>_<kind>`` (kind: transport, no_json, invalid_json, schema).
    """
    out = run_role(llm, template, variables, payload=payload)
    tally[f"calls_{template}"] += 1
    if isinstance(out, RoleFailure):
        tally[f"failed_{template}_{out.kind}"] += 1
        return None
    return out


def ask_many(
    llm: Any, template: str, calls: Sequence[tuple[Mapping[str, Any], Any]], tally: Tally
) -> list[dict[str, Any] | None]:
    """``ask`` for several independent ``(variables, payload)`` calls of one template, in order.

    Through ``LLM.chat_many``, so a real endpoint answers them concurrently (``llm.max_concurrency``).
    """
    results = llm.chat_many([build_request(template, v, payload=p) for v, p in calls])
    out: list[dict[str, Any] | None] = []
    for res in results:
        tally[f"calls_{template}"] += 1
        fail = failure_of(template, res)
        if fail is not None:
            tally[f"failed_{template}_{fail.kind}"] += 1
            out.append(None)
        else:
            out.append(res.data)
    return out


def source_id(turn: Turn) -> str:
    """The id R@k credits: the turn's ``source_id``, or its id for streams that leave it unset."""
    return turn.source_id or turn.id


# ---------------------------------------------------------------- vectors


class VectorIndex:
    """Exact cosine search over L2-normalised rows with string ids; rows can be replaced or deleted.

    Small by design (one dialogue's memories): a dense matrix, a row per live id, a partial sort for top-k (ties by position).
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._rows = np.zeros((16, dim), dtype=np.float32)
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, key: str) -> bool:
        return key in self._pos

    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    def matrix(self) -> np.ndarray:
        return self._rows[: len(self._ids)]

    def vector(self, key: str) -> np.ndarray:
        return self._rows[self._pos[key]]

    def add(self, key: str, vec: np.ndarray) -> None:
        if key in self._pos:
            raise KeyError(f"VectorIndex: id {key!r} already present")
        n = len(self._ids)
        if n == self._rows.shape[0]:
            self._rows = np.vstack([self._rows, np.zeros_like(self._rows)])
        self._rows[n] = vec
        self._ids.append(key)
        self._pos[key] = n

    def replace(self, key: str, vec: np.ndarray) -> None:
        self._rows[self._pos[key]] = vec

    def delete(self, key: str) -> None:
        """Swap-remove: the last row takes the deleted row's place (order of ids is not meaningful)."""
        i = self._pos.pop(key)
        last = len(self._ids) - 1
        if i != last:
            moved = self._ids[last]
            self._rows[i] = self._rows[last]
            self._ids[i] = moved
            self._pos[moved] = i
        self._ids.pop()

    def search(self, query: np.ndarray, k: int | None) -> list[tuple[str, float]]:
        """``(id, cosine)`` best first; ties broken by id order of insertion position."""
        n = len(self._ids)
        if n == 0:
            return []
        with single_thread_blas():
            scores = self.matrix() @ query
        top = top_positions(scores, n if k is None else k)  # best first, ties by position (also at the cut)
        return [(self._ids[i], float(scores[i])) for i in top]


def min_max(x: np.ndarray) -> np.ndarray:
    """``(x - min) / (max - min)``; all ones when every value is equal (HippoRAG's normaliser, made total)."""
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    if hi - lo < 1e-12:
        return np.ones_like(x)
    return (x - lo) / (hi - lo)


# ---------------------------------------------------------------- text rules of the offline roles

_SENT = re.compile(r"(?<=[.!?])\s+")
_CHANGE = re.compile(
    r"\b(?:no longer|not anymore|any ?more|stopped|quit|quitting|gave up|used to|instead|changed|switched|"
    r"moved|broke up|cancel(?:l?ed)?|isn't|aren't|wasn't|don't|doesn't|didn't|not|never|actually)\b",
    re.I,
)
_FIRST_PERSON = [
    (re.compile(r"\bI'm\b|\bI am\b"), "{n} is"),
    (re.compile(r"\bI've\b|\bI have\b"), "{n} has"),
    (re.compile(r"\bI'll\b"), "{n} will"),
    (re.compile(r"\bI'd\b"), "{n} would"),
    (re.compile(r"\bI was\b"), "{n} was"),
    (re.compile(r"\bI\b"), "{n}"),
    (re.compile(r"\bmyself\b", re.I), "{n}"),
    (re.compile(r"\bmy\b", re.I), "{n}'s"),
    (re.compile(r"\bmine\b", re.I), "{n}'s"),
    (re.compile(r"\bme\b", re.I), "{n}"),
]


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENT.split(text or "") if s.strip()]


def content_terms(text: str) -> list[str]:
    """Lowercased words that are neither stop words nor chat fillers."""
    return [w for w in words(text) if w not in STOP_WORDS and w not in FILLERS]


def is_filler(sentence: str, min_terms: int = 2) -> bool:
    """A sentence with fewer than ``min_terms`` informative words ("Wow, thanks!") or a bare question."""
    if sentence.rstrip().endswith("?"):
        return True
    return len(content_terms(sentence)) < min_terms


def third_person(text: str, name: str) -> str:
    """First person rewritten with the speaker's name, so a fact stays self-contained out of its turn."""
    out = text
    for pattern, repl in _FIRST_PERSON:
        out = pattern.sub(repl.format(n=name), out)
    return out


def has_change_cue(text: str) -> bool:
    """Negation or change of state: the offline roles' sign that a new fact contradicts an old one."""
    return _CHANGE.search(text or "") is not None


_KEYWORDS = KeywordExtractor()
# YAKE is the costly step: memoise it per text on this extractor, so ``keywords`` (which calls ``phrases``
# inside) and ``phrases`` run it once per text, shared by every baseline in the process.
_KEYWORDS.phrases = lru_cache(maxsize=1 << 15)(_KEYWORDS.phrases)  # type: ignore[method-assign]


@lru_cache(maxsize=1 << 15)
def _keywords(text: str, speakers: tuple[str, ...]) -> tuple[str, ...]:
    return _KEYWORDS(text, speakers=speakers)


def keywords(text: str, speakers: Iterable[str] = ()) -> tuple[str, ...]:
    """``allmem.text.keywords`` (speakers, YAKE phrases, names, dates, numbers), memoised per text."""
    return _keywords(text, tuple(speakers))


def phrases(text: str) -> tuple[str, ...]:
    """YAKE keyphrases only (topics: no speaker, no dates), memoised per text."""
    return tuple(_KEYWORDS.phrases(text))


@lru_cache(maxsize=1 << 15)
def names(text: str) -> tuple[str, ...]:
    """Capitalised names in ``text``, memoised per text."""
    return tuple(_KEYWORDS.names(text))


def unique(items: Sequence[str]) -> list[str]:
    """Case-insensitive de-duplication keeping the first spelling."""
    seen: set[str] = set()
    out = []
    for x in items:
        key = x.lower()
        if x and key not in seen:
            seen.add(key)
            out.append(x)
    return out
