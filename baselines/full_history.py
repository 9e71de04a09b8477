"""Full history: the whole conversation as context, most recent turns kept when it exceeds the budget.

Retrieval ignores the query: every turn is returned, most recent first, so the harness's prefix cut
(``allmem.budget.pack``) keeps the most recent turns that fit and R@k measures recency. The score is the turn's
stream position, so a higher score means more recent.
"""

from __future__ import annotations

import time
from datetime import datetime

import numpy as np

from allmem.systems import Resources
from allmem.types import RetrievalResult

from ._turns import TurnMemory


class FullHistory(TurnMemory):
    name = "full_history"
    search_kind = "recency"

    def __init__(self, k: int | None = None, resources: Resources | None = None) -> None:
        super().__init__(k=k, resources=resources)

    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        t0 = time.perf_counter()
        scores = np.array([float(t.order) for t in self.turns], dtype=np.float64)
        # recency = stream position; ties (should not happen) fall back to later-ingested first
        scores = scores + np.arange(len(self.turns)) * 1e-9
        return self.ranked(scores, {"rank": 1000 * (time.perf_counter() - t0)})
