"""Score fusion of a lexical and a dense channel: per-query min-max normalisation, then a convex combination.

Why this and not reciprocal rank fusion: rank fusion throws away how far ahead the best hit is. Bruch et al.
("An Analysis of Fusion Functions for Hybrid Retrieval", ACM TOIS 2023) find a convex combination of min-max
normalised scores at least as good as RRF and easier to tune (one weight); on LoCoMo's fit conversations it is
clearly better (see ``scripts/fit_retrieval.py``). Used by the ``hybrid_rag`` baseline over turns and by
All-Mem's fused Stage 1 / Stage 3 over a bank, so both fuse the same way.

The normalisation is fitted on a reference set of scores (the whole corpus, or the union of each channel's top
list for large banks) and then applied unchanged to any other unit, so a unit reached later (Stage 2) is scored
on the same scale as the anchors: ``norm(s) = (s - lo) / (hi - lo)``, 0 for every unit when hi == lo.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MinMax:
    """One channel's per-query scale: ``(s - lo) / (hi - lo)``."""

    lo: float
    hi: float

    @classmethod
    def fit(cls, ref: np.ndarray) -> MinMax:
        ref = np.asarray(ref)
        if len(ref) == 0:
            return cls(0.0, 0.0)
        # the array methods: np.min's dispatch costs microseconds, and this runs once per query
        return cls(float(ref.min()), float(ref.max()))

    def __call__(self, s: np.ndarray) -> np.ndarray:
        span = self.hi - self.lo
        if span <= 0:
            return np.zeros_like(np.asarray(s, dtype=np.float64))
        return (np.asarray(s, dtype=np.float64) - self.lo) / span


@dataclass(frozen=True)
class Fusion:
    """``weight * norm_lex(lexical) + (1 - weight) * norm_dense(dense)``, scales fitted on reference scores."""

    weight: float
    lex: MinMax
    dense: MinMax

    @classmethod
    def fit(cls, weight: float, lexical_ref: np.ndarray, dense_ref: np.ndarray) -> Fusion:
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"fusion weight must lie in [0, 1], got {weight}")
        return cls(weight, MinMax.fit(lexical_ref), MinMax.fit(dense_ref))

    def __call__(self, lexical: np.ndarray, dense: np.ndarray) -> np.ndarray:
        return self.weight * self.lex(lexical) + (1.0 - self.weight) * self.dense(dense)


def fuse(lexical: np.ndarray, dense: np.ndarray, weight: float) -> np.ndarray:
    """Fuse two score arrays over the same items, each normalised over all of them."""
    return Fusion.fit(weight, lexical, dense)(lexical, dense)


def top_positions(scores: np.ndarray, k: int, ordered: bool = True) -> np.ndarray:
    """Positions of the k best scores, ties broken by position (callers keep rows ascending).

    Best first when ``ordered``, else in no particular order (a set is all a pool needs). argpartition first, so a
    large array is never fully sorted; exactly min(k, len) positions come back.
    """
    n = len(scores)
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.int64)
    if k >= n:
        return np.lexsort((np.arange(n), -scores)) if ordered else np.arange(n)
    # array methods rather than np.partition / np.flatnonzero: their Python wrappers cost more than the work
    # on a few hundred scores (this runs several times per query)
    neg = -scores
    neg.partition(k - 1)
    kth = -neg[k - 1]  # the k-th best value (negated twice: exact)
    cand = (scores >= kth).nonzero()[0]
    if ordered:
        return cand[np.lexsort((cand, -scores[cand]))][:k]
    if len(cand) == k:  # no tie across the cut: the usual case, one comparison
        return cand
    above = (scores > kth).nonzero()[0]
    at_cut = (scores == kth).nonzero()[0][: k - len(above)]
    return np.concatenate([above, at_cut])
