"""Stage 1 latency on the full bank against the visible surface, measured at a consolidation checkpoint.

Why (paper Fig. 5c): query-time anchoring searches the visible surface, so its cost should follow the maintained
surface rather than the history length N. At each checkpoint the same query vectors are searched, with the same
implementation and the same k, over both surfaces; each query's time is the fastest of ``repeats`` searches (the
usual micro-benchmark estimate: interruptions only ever add time), and the median over the queries goes into
``atc_events.jsonl`` as a ``probe`` line.
The query vectors are embeddings of units spread evenly over the bank: Stage 1 time depends on the surface size
and k, not on what is asked, and no benchmark question is ever seen. A measurement only: nothing in the bank
changes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from allmem.memory.bank import MemoryBank
from allmem.memory.vector import SurfaceIndex


@dataclass(frozen=True)
class ProbeConfig:
    """``method.probe``: ``queries`` vectors per checkpoint (0 = off), top-``k``, each timed ``repeats`` times."""

    WHERE: ClassVar[str] = "method.probe"  # its node in the config; values: configs/method/allmem.yaml

    queries: int
    k: int
    repeats: int

    def __post_init__(self) -> None:
        if self.queries < 0 or self.k < 1 or self.repeats < 1:
            raise ValueError(f"method.probe: queries >= 0, k >= 1, repeats >= 1 (got {self})")


def _time_ms(index: SurfaceIndex, queries: np.ndarray, k: int, repeats: int) -> list[float]:
    """Per query, the fastest of ``repeats`` searches (ms)."""
    out = []
    for q in queries:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            index.search(q, k)
            best = min(best, time.perf_counter() - t0)
        out.append(1000 * best)
    return out


def stage1_probe(
    bank: MemoryBank, cfg: ProbeConfig, vector: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Median Stage 1 milliseconds over the full bank and over the visible surface, with both sizes."""
    n = len(bank)
    rows = np.unique(np.linspace(0, n - 1, num=min(cfg.queries, n)).round().astype(int)) if n else []
    queries = np.asarray(bank.full_matrix_view()[rows], dtype=np.float32) if n else np.zeros((0, bank.dim))
    result: dict[str, Any] = {"n_units": n, "n_visible": bank.n_visible, "k": cfg.k, "queries": len(queries),
                              "repeats": cfg.repeats}  # fmt: skip
    for surface in ("full", "visible"):
        index = SurfaceIndex(bank, surface=surface, **dict(vector or {}))
        index.sync()
        if len(queries):
            index.search(queries[0], cfg.k)  # warm-up: first-call overheads are not Stage 1 latency
        times = _time_ms(index, queries, cfg.k, cfg.repeats)
        result[f"stage1_{surface}_ms"] = statistics.median(times) if times else None
        result[f"stage1_{surface}_ms_mean"] = statistics.fmean(times) if times else None
    return result
