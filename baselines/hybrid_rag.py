"""Hybrid RAG: BM25 and dense cosine over the rendered turns, each min-max normalised per query, fused by weight.

The flat retriever a practitioner tries first (Elasticsearch/Weaviate/Vespa "hybrid search" with score
normalisation; Bruch et al., TOIS 2023): the ``bm25`` baseline's scorer (Lucene BM25, stemmed) and the
``naive_rag`` baseline's embeddings (the same turn texts, so the shared embedding cache serves both), fused as
``weight * bm25_norm + (1 - weight) * cosine_norm`` (``allmem.memory.fusion``), each channel normalised over
all turns of the dialogue. ``weight``, k1 and b in ``configs/method/hybrid_rag.yaml`` were chosen on the fit
conversations by ``scripts/fit_retrieval.py``.
"""

from __future__ import annotations

import time
from datetime import datetime

from allmem.memory.fusion import fuse
from allmem.systems import Resources
from allmem.types import RetrievalResult, Turn

from .bm25 import TurnBM25
from .naive_rag import NaiveRAG


class HybridRAG(NaiveRAG):
    name = "hybrid_rag"
    search_kind = "dense+lexical"

    def __init__(
        self,
        k: int | None = 50,
        *,  # weight, k1, b: fitted, their one home is configs/method/hybrid_rag.yaml
        weight: float,
        k1: float,
        b: float,
        resources: Resources | None = None,
    ) -> None:
        super().__init__(k=k, resources=resources)
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"configs/method/hybrid_rag.yaml: weight must lie in [0, 1], got {weight!r}")
        self.weight = weight
        self.lexical = TurnBM25(k1, b)

    def reset(self, dialogue_id: str) -> None:
        super().reset(dialogue_id)
        self.lexical.reset()

    def ingest(self, turn: Turn) -> None:
        super().ingest(turn)
        self.lexical.add(turn.render())

    def end_stream(self) -> None:
        super().end_stream()
        self.lexical.build()

    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        index_ms = self._flush() + self.lexical.build()
        t0 = time.perf_counter()
        q = self.embedder.encode_one(query)
        t1 = time.perf_counter()
        if self.turns:
            scores = fuse(self.lexical.scores(query), (self._vectors @ q).astype("float64"), self.weight)
        else:
            scores = self.lexical.scores(query)
        t2 = time.perf_counter()
        result = self.ranked(scores, {})
        timings = {"index": index_ms, "embed": 1000 * (t1 - t0), "search": 1000 * (t2 - t1)}
        return RetrievalResult(units=result.units, timings_ms=timings)
