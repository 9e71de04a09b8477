"""Naive RAG: dense cosine similarity between the query and every turn, top ``k``.

Turns are buffered at ingest and embedded in batches just before the first retrieval after new turns arrive (or
at ``end_stream``), so ingestion stays batched and the embedder's cache makes reruns free. The default ``k`` (50)
is larger than what fits the 2048-token budget, so the budget, not ``k``, decides how much evidence is used.
"""

from __future__ import annotations

import time
from datetime import datetime

import numpy as np

from allmem.systems import Resources
from allmem.types import RetrievalResult

from ._turns import TurnMemory


class NaiveRAG(TurnMemory):
    name = "naive_rag"
    search_kind = "dense"

    def __init__(self, k: int | None = 50, resources: Resources | None = None) -> None:
        super().__init__(k=k, resources=resources)
        if self.resources.embedder is None:
            raise ValueError("NaiveRAG needs resources.embedder (configs/embedder)")
        self.embedder = self.resources.embedder
        self._vectors = np.zeros((0, self.embedder.dim), dtype=np.float32)  # rows = self.turns[:n]

    def reset(self, dialogue_id: str) -> None:
        super().reset(dialogue_id)
        self._vectors = np.zeros((0, self.embedder.dim), dtype=np.float32)

    def _flush(self) -> float:
        """Embed turns added since the last flush (one batched call); returns milliseconds spent."""
        t0 = time.perf_counter()
        pending = self.turns[self._vectors.shape[0] :]
        if pending:
            fresh = self.embedder.encode([t.render() for t in pending])
            self._vectors = np.vstack([self._vectors, fresh])
        return 1000 * (time.perf_counter() - t0)

    def end_stream(self) -> None:
        self._flush()

    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        flush_ms = self._flush()
        t0 = time.perf_counter()
        q = self.embedder.encode_one(query)
        t1 = time.perf_counter()
        scores = self._vectors @ q if len(self.turns) else np.zeros(0, dtype=np.float32)
        t2 = time.perf_counter()
        result = self.ranked(scores.astype(np.float64), {})
        timings = {"index": flush_ms, "embed": 1000 * (t1 - t0), "search": 1000 * (t2 - t1)}
        return RetrievalResult(units=result.units, timings_ms=timings)
