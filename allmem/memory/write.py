"""The online write path: descriptor -> embed -> temporal and semantic links -> ATC buffer (docs/METHOD.md).

Why turns are buffered and written in batches: the descriptor of a turn depends only on its own evidence, and
its embedding only on the descriptor, so both can be computed for a whole batch at once (one embedder call per
batch instead of one per turn) without changing any result. Linking is then done strictly one unit at a time,
in stream order, with the ``after_write`` hook (the ATC buffer) called after each unit: a unit's semantic links
only consider units written before it, and consolidation triggered mid-batch sees exactly the bank a
turn-by-turn writer would have built.

A descriptor failure never stops a run: the unit falls back to its cleaned evidence text as the summary, and
the failure is counted (``descriptor_failures``), never silent.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import numpy as np

from allmem.llm.client import pool_size
from allmem.memory.bank import MemoryBank
from allmem.memory.units import EMBED_FORMATS, descriptor_text
from allmem.threads import single_thread_blas
from allmem.types import Turn, utterance_line

_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class WriteConfig:
    """Online write settings. Semantic linking follows the authors' code: up to ``sem_per_insert`` most similar
    visible units at cosine >= ``sem_threshold``, linked both ways (the bank's d_sigma cap then applies)."""

    WHERE: ClassVar[str] = "method.write"  # its node in the config; values: configs/method/allmem.yaml

    sem_threshold: float
    sem_per_insert: int
    batch_turns: int
    embed_format: str  # the descriptor layout z is computed from (allmem.memory.units.descriptor_text)
    describe_workers: int  # descriptor calls in parallel (at least llm.max_concurrency), kept in stream order

    def __post_init__(self) -> None:
        if self.embed_format not in EMBED_FORMATS:
            raise ValueError(
                f"method.write.embed_format must be one of {EMBED_FORMATS}, got {self.embed_format!r}"
            )
        if self.batch_turns < 1 or self.describe_workers < 1 or self.sem_per_insert < 0:
            raise ValueError(
                "method.write: batch_turns and describe_workers must be >= 1, sem_per_insert >= 0"
            )


def turn_record(turn: Turn) -> dict[str, Any]:
    """The immutable evidence record of one dialogue turn."""
    return {
        "speaker": turn.speaker,
        "text": turn.text,
        "caption": turn.caption,
        "date": turn.timestamp.isoformat(),
        "source_ids": [turn.source_id or turn.id],
    }


def clean_evidence(records: Sequence[Mapping[str, Any]]) -> str:
    """The fallback summary: evidence text with whitespace collapsed (``Speaker: text [image: caption]``)."""
    lines = (utterance_line(r.get("speaker"), str(r.get("text", "")), r.get("caption")) for r in records)
    return " ".join(_WS.sub(" ", line).strip() for line in lines)


def default_describe() -> Callable[[Any, list[dict[str, Any]]], Any]:
    """The descriptor role (imported here, not at module level: it pulls in the keyword extractor)."""
    from allmem.memory.descriptor import describe

    return describe


@dataclass
class _Pending:
    records: list[dict[str, Any]]
    timestamp: datetime
    order: int


class OnlineWriter:
    """Writes turns into a bank; ``after_write(uid)`` is called once per unit, in stream order."""

    def __init__(
        self,
        bank: MemoryBank,
        embedder: Any,
        llm: Any,
        cfg: WriteConfig,
        describe: Callable[[Any, list[dict[str, Any]]], Any] | None = None,
        after_write: Callable[[str], None] | None = None,
    ) -> None:
        self.bank, self.embedder, self.llm, self.cfg = bank, embedder, llm, cfg
        self.describe = describe or default_describe()
        self.after_write = after_write
        self.last_id: str | None = None
        self._pending: list[_Pending] = []
        self.counters: dict[str, float] = dict.fromkeys(
            ("units_written", "descriptor_failures", "semantic_links", "temporal_links"), 0
        )
        self.timers_ms: dict[str, float] = dict.fromkeys(("describe", "embed", "link", "after_write"), 0.0)
        self.failures: list[dict[str, Any]] = []

    def add(self, turn: Turn) -> None:
        self._pending.append(_Pending([turn_record(turn)], turn.timestamp, turn.order))
        if len(self._pending) >= self.cfg.batch_turns:
            self.flush()

    def flush(self) -> list[str]:
        """Write every buffered turn; returns the new unit ids in stream order."""
        if not self._pending:
            return []
        batch, self._pending = self._pending, []
        t0 = time.perf_counter()
        descriptors = self._describe_all([p.records for p in batch])
        t1 = time.perf_counter()
        texts = [descriptor_text(s, k, self.cfg.embed_format) for s, k in descriptors]
        vecs = np.asarray(self.embedder.encode(texts), dtype=np.float32)
        t2 = time.perf_counter()
        self.timers_ms["describe"] += 1000 * (t1 - t0)
        self.timers_ms["embed"] += 1000 * (t2 - t1)
        ids = []
        for p, (summary, keywords), vec in zip(batch, descriptors, vecs, strict=True):
            ids.append(self._link_one(p, summary, keywords, vec))
        return ids

    def _describe_all(self, batch: list[list[dict[str, Any]]]) -> list[tuple[str, tuple[str, ...]]]:
        workers = min(pool_size(self.llm, self.cfg.describe_workers), len(batch))
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                results = list(pool.map(lambda recs: self.describe(self.llm, recs), batch))
        else:
            results = [self.describe(self.llm, recs) for recs in batch]
        return [self._descriptor_or_fallback(recs, res) for recs, res in zip(batch, results, strict=True)]

    def _descriptor_or_fallback(self, records: list[dict[str, Any]], res: Any) -> tuple[str, tuple[str, ...]]:
        summary = getattr(res, "summary", None)
        if isinstance(summary, str) and summary.strip():
            return summary.strip(), tuple(
                str(k) for k in (getattr(res, "keywords", None) or ()) if str(k).strip()
            )
        self.counters["descriptor_failures"] += 1
        kind, message = getattr(res, "kind", ""), getattr(res, "message", None)
        reason = f"{kind}: {message}" if message is not None else repr(res)
        if len(self.failures) < 100:
            self.failures.append({"source_ids": records[0].get("source_ids"), "reason": str(reason)[:300]})
        return clean_evidence(records), ()

    def _link_one(self, p: _Pending, summary: str, keywords: tuple[str, ...], vec: np.ndarray) -> str:
        t0 = time.perf_counter()
        neighbours = self.semantic_neighbours(vec)
        uid = self.bank.create_unit(
            p.records, summary, keywords, vec, p.timestamp, order=p.order, visible=True
        )
        if self.last_id is not None and self.last_id in self.bank:
            self.bank.add_link("temporal", self.last_id, uid)
            self.counters["temporal_links"] += 1
        for other, score in neighbours:
            fwd, back = self.bank.link_semantic(uid, other, score)
            self.counters["semantic_links"] += int(fwd) + int(back)
        self.last_id = uid
        self.counters["units_written"] += 1
        t1 = time.perf_counter()
        self.timers_ms["link"] += 1000 * (t1 - t0)
        if self.after_write is not None:
            self.after_write(uid)
            self.timers_ms["after_write"] += 1000 * (time.perf_counter() - t1)
        return uid

    def semantic_neighbours(self, vec: np.ndarray) -> list[tuple[str, float]]:
        """The most similar visible units written before this one, at cosine >= the threshold, best first."""
        m = self.cfg.sem_per_insert
        mat = self.bank.visible_matrix_view()
        if m == 0 or len(mat) == 0:
            return []
        q = vec / (float(np.linalg.norm(vec)) or 1.0)
        with single_thread_blas():
            scores = mat @ q.astype(np.float32)
        m = min(m, len(scores))
        pos = np.argpartition(-scores, m - 1)[:m] if m < len(scores) else np.arange(len(scores))
        ids = self.bank.visible_ids_at(pos)
        rows = self.bank.rows_of(ids)
        order = np.lexsort((rows, -scores[pos]))
        return [(ids[i], float(scores[pos[i]])) for i in order if scores[pos[i]] >= self.cfg.sem_threshold]
