"""BM25 Okapi (``rank_bm25.BM25Okapi`` defaults k1=1.5, b=0.75, idf floor) over the rendered turns, top ``k``.

Kept for continuity with earlier tables: the project's first BM25 baseline. The standard baseline is ``bm25``
(Lucene BM25 with stemming, parameters fitted; ``baselines/bm25.py``); the two differ in scorer and stemming,
not in stop words or word splitting, which both take from ``allmem.text``. Tokenisation: lowercase, words are
runs of letters/digits (an apostrophe splits: "don't" -> "don", "t"), stop words removed, no stemming. The
index is rebuilt lazily when turns were added since the last retrieval.
"""

from __future__ import annotations

import time
from datetime import datetime

import numpy as np
from rank_bm25 import BM25Okapi as _RankBM25Okapi

from allmem.systems import Resources
from allmem.text import content_words as tokenize  # lowercase words minus stop words, unstemmed
from allmem.types import RetrievalResult

from ._turns import TurnMemory


class BM25Okapi(TurnMemory):
    name = "bm25_okapi"
    search_kind = "lexical"

    def __init__(self, k: int | None = 50, resources: Resources | None = None) -> None:
        super().__init__(k=k, resources=resources)
        self._index: _RankBM25Okapi | None = None
        self._indexed = 0

    def reset(self, dialogue_id: str) -> None:
        super().reset(dialogue_id)
        self._index, self._indexed = None, 0

    def _build(self) -> float:
        t0 = time.perf_counter()
        if self.turns and self._indexed != len(self.turns):
            # BM25Okapi cannot take an empty corpus or an all-empty document list: pad empty docs with a
            # token no query can produce, so every turn keeps its row
            docs = [tokenize(t.render()) or ["\0"] for t in self.turns]
            self._index = _RankBM25Okapi(docs)
            self._indexed = len(self.turns)
        return 1000 * (time.perf_counter() - t0)

    def end_stream(self) -> None:
        self._build()

    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        build_ms = self._build()
        t0 = time.perf_counter()
        terms = tokenize(query)
        if self._index is None or not terms:
            scores = np.zeros(len(self.turns), dtype=np.float64)
        else:
            scores = np.asarray(self._index.get_scores(terms), dtype=np.float64)
        result = self.ranked(scores, {})
        timings = {"index": build_ms, "search": 1000 * (time.perf_counter() - t0)}
        return RetrievalResult(units=result.units, timings_ms=timings)
