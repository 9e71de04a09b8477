"""BM25 over the rendered turns, top ``k``: Lucene's BM25 with Snowball stemming, k1 and b fitted.

The standard lexical baseline (what Pyserini/Lucene or bm25s give a practitioner), scored by the project's one
BM25 home (``allmem.memory.lexical.BM25Scorer``, on bm25s) over ``allmem.text.index_terms``: the same terms and
formula as All-Mem's lexical channel and ``hybrid_rag``. k1 and b in ``configs/method/bm25.yaml`` were chosen on
the fit conversations by ``scripts/fit_retrieval.py``. The index is rebuilt lazily when turns were added since
the last retrieval. ``bm25_okapi`` keeps the project's first (rank_bm25 Okapi, unstemmed) baseline.
"""

from __future__ import annotations

import time
from datetime import datetime

import numpy as np

from allmem.memory.lexical import BM25Params, BM25Scorer
from allmem.systems import Resources
from allmem.text import index_terms
from allmem.types import RetrievalResult

from ._turns import TurnMemory


class TurnBM25:
    """Lucene BM25 over a growing list of turns, rebuilt on the first query after new turns."""

    def __init__(self, k1: float, b: float) -> None:
        self.params = BM25Params(k1, b)
        self._terms: list[list[str]] = []
        self._scorer: BM25Scorer | None = None

    def reset(self) -> None:
        self._terms, self._scorer = [], None

    def add(self, text: str) -> None:
        self._terms.append(index_terms(text))
        self._scorer = None

    def build(self) -> float:
        """Index upkeep (ms): rebuild if turns were added since the last build."""
        t0 = time.perf_counter()
        if self._scorer is None:
            self._scorer = BM25Scorer(self._terms, self.params)
        return 1000 * (time.perf_counter() - t0)

    def scores(self, query: str) -> np.ndarray:
        self.build()
        assert self._scorer is not None
        return self._scorer.scores(index_terms(query))


class BM25(TurnMemory):
    name = "bm25"
    search_kind = "lexical"

    def __init__(
        self, k: int | None = 50, *, k1: float, b: float, resources: Resources | None = None
    ) -> None:  # k1, b: fitted, their one home is configs/method/bm25.yaml
        super().__init__(k=k, resources=resources)
        self.lexical = TurnBM25(k1, b)

    def reset(self, dialogue_id: str) -> None:
        super().reset(dialogue_id)
        self.lexical.reset()

    def ingest(self, turn) -> None:  # noqa: ANN001 - Turn, as in the base class
        super().ingest(turn)
        self.lexical.add(turn.render())

    def end_stream(self) -> None:
        self.lexical.build()

    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        build_ms = self.lexical.build()
        t0 = time.perf_counter()
        scores = self.lexical.scores(query)
        result = self.ranked(scores, {})
        timings = {"index": build_ms, "search": 1000 * (time.perf_counter() - t0)}
        return RetrievalResult(units=result.units, timings_ms=timings)
