"""The one BM25 home: Lucene-style BM25 (``bm25s``) over ``allmem.text.index_terms``, for turn lists and banks.

Every lexical scorer in the project goes through ``BM25Scorer``: the ``bm25`` and ``hybrid_rag`` baselines over
rendered turns, and All-Mem's lexical channel over a bank (``BM25Index``). Only ``bm25_okapi`` (the continuity
baseline on rank_bm25) scores differently, on purpose. Parameters (k1, b) come from the method configs.

Lucene's BM25 (Kamphuis et al., ECIR 2020, "Which BM25 do you mean?"), as bm25s computes it:
idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)) and score(q, d) = sum over query terms t of
idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl)), a repeated query term counting once per occurrence.

Why the bank index rebuilds rather than updates in place: bm25s precomputes every (document, term) score in a
sparse matrix, which makes a query a few sparse column sums but cannot absorb one new document. A bank changes
after every turn while queries usually come in bursts after writes (the harness asks only after the stream
ends), so the index is rebuilt lazily, on the first query after a change; the rebuild is index upkeep, timed
apart from query latency as the paper does for the dense index. Statistics (N, df, avgdl) cover every unit of
the bank, archived ones included, so a unit reached at Stage 2 is scored on the same scale as an anchor;
visibility decides only which units Stage 1 may return.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from allmem.memory.bank import MemoryBank, Unit
from allmem.memory.fusion import top_positions
from allmem.text import index_terms

FIELDS = ("descriptor", "evidence", "both")


@dataclass(frozen=True)
class BM25Params:
    """Lucene BM25 parameters. Defaults are Lucene's; each method config sets its own fitted values."""

    k1: float = 1.2
    b: float = 0.75

    def __post_init__(self) -> None:
        if not (self.k1 >= 0 and 0 <= self.b <= 1):
            raise ValueError(f"bm25: need k1 >= 0 and 0 <= b <= 1, got k1={self.k1}, b={self.b}")


class BM25Scorer:
    """Lucene BM25 over a fixed list of documents (term lists): a thin wrapper on ``bm25s.BM25``."""

    def __init__(self, docs: Sequence[Sequence[str]], params: BM25Params = BM25Params()) -> None:
        import bm25s

        # bm25s sets its logger to DEBUG on import and logs every index build; a bank rebuilds often
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self.n_docs = len(docs)
        self.params = params
        self._index = None
        self._columns: tuple[np.ndarray, np.ndarray, list[int]] | None = None
        if any(docs):
            self._index = bm25s.BM25(k1=params.k1, b=params.b, method="lucene")
            self._index.index([list(d) for d in docs], show_progress=False)
            self._columns = _term_columns(self._index, self.n_docs)

    def scores(self, query_terms: Sequence[str]) -> np.ndarray:
        """BM25 of every document (float64, document order); zeros when no query term is in the vocabulary.

        The sum runs over bm25s's own precomputed (term, document) scores, as ``get_scores_from_ids`` does and
        with the same float32 additions in the same order (bit-identical, checked by a test), but without its
        per-call set-up, which costs about as much as the sum on a bank of a few hundred units.
        """
        if self._index is None:
            return np.zeros(self.n_docs, dtype=np.float64)
        ids = self._index.get_tokens_ids(list(query_terms))
        if not ids:
            return np.zeros(self.n_docs, dtype=np.float64)
        if self._columns is None:
            return self._index.get_scores_from_ids(ids).astype(np.float64)
        data, docs, ptr = self._columns
        out = np.zeros(self.n_docs, dtype=data.dtype)
        for t in ids:
            np.add.at(out, docs[ptr[t] : ptr[t + 1]], data[ptr[t] : ptr[t + 1]])
        return out.astype(np.float64)


def _term_columns(index: Any, n_docs: int) -> tuple[np.ndarray, np.ndarray, list[int]] | None:
    """bm25s's score matrix (one column per term) as (scores, document ids as intp, column starts as ints), or
    None where its query sum adds more than these columns (a non-occurrence term: BM25L, BM25+) and
    ``get_scores_from_ids`` must run."""
    m = index.scores
    if getattr(index, "nonoccurrence_array", None) is not None or int(m["num_docs"]) != n_docs:
        return None
    return m["data"], m["indices"].astype(np.intp), m["indptr"].tolist()


def unit_text(unit: Unit, field: str) -> str:
    if field == "descriptor":
        return unit.descriptor_text()
    if field == "evidence":
        return unit.evidence_text()
    return f"{unit.descriptor_text()}\n{unit.evidence_text()}"


class BM25Index:
    """BM25 over a bank (rows = bank rows), rebuilt lazily after the bank changed; searches a surface."""

    def __init__(
        self,
        bank: MemoryBank,
        surface: str = "visible",
        field: str = "descriptor",
        params: BM25Params = BM25Params(),
    ) -> None:
        if field not in FIELDS:
            raise ValueError(f"method.retrieval.bm25_field must be one of {FIELDS}, got {field!r}")
        if surface not in ("visible", "full"):
            raise ValueError(f"method.retrieval.surface must be 'visible' or 'full', got {surface!r}")
        self.bank, self.surface, self.field, self.params = bank, surface, field, params
        self._terms: list[list[str]] = []  # by bank row
        self._scorer: BM25Scorer | None = None
        self._df: dict[str, int] = {}
        self._common: dict[float, frozenset[str]] = {}
        self._rows = np.zeros(0, dtype=np.int64)  # surface rows, refreshed on sync
        self._pos = -1
        self.rebuilds = 0

    def sync(self) -> None:
        """Re-tokenise the units touched since the last sync and rebuild the scorer (no-op when unchanged)."""
        if self._pos == self.bank.revision:
            return
        changes = self.bank.changes_since(max(self._pos, 0)) if self._pos >= 0 else None
        touched = {uid for kind, uid in changes if kind != "archive"} if changes is not None else None
        n = len(self.bank)
        self._terms.extend([] for _ in range(n - len(self._terms)))
        for unit in self.bank.units() if touched is None else map(self.bank.get, touched):
            self._terms[unit.row] = index_terms(unit_text(unit, self.field))
        if touched is None or touched or self._scorer is None:
            self._scorer = BM25Scorer(self._terms, self.params)
            self._df = dict(Counter(t for terms in self._terms for t in set(terms)))
            self._common = {}
            self.rebuilds += 1
        if self.surface == "full":
            self._rows = np.arange(n, dtype=np.int64)
        else:
            self._rows = np.sort(self.bank.rows_of(self.bank.visible_ids()))
        self._pos = self.bank.revision

    def scores_all(self, query: str) -> np.ndarray:
        """BM25 of every unit of the bank, by row (archived units included)."""
        self.sync()
        assert self._scorer is not None
        return self._scorer.scores(index_terms(query))

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        """Top-k surface units with a positive score, best first (ties: older unit first)."""
        return self.top(self.scores_all(query), k)

    def top(self, scores: np.ndarray, k: int) -> list[tuple[str, float]]:
        """Top-k surface units of a ``scores_all`` array with a positive score, best first (ties: older first)."""
        rows, s = self.top_rows(scores, k)
        return list(zip(self.bank.full_ids_at(rows), map(float, s), strict=True))

    def top_rows(self, scores: np.ndarray, k: int, ordered: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """``top`` as bank rows and scores (arrays); ``ordered=False``: the same set in row order."""
        self.sync()
        rows = self._rows
        s = scores[rows]
        keep = (s > 0).nonzero()[0]
        order = keep[top_positions(s[keep], k, ordered)]
        return rows[order], s[order]

    def score(self, query: str, ids: Sequence[str]) -> list[float]:
        """BM25 of arbitrary units (archived ones included)."""
        scores = self.scores_all(query)
        return [float(scores[r]) for r in self.bank.rows_of(list(ids))]

    def surface_rows(self) -> np.ndarray:
        """Bank rows of the searched surface, ascending."""
        self.sync()
        return self._rows

    def common_terms(self, max_df: float) -> frozenset[str]:
        """Terms found in more than ``max_df`` of the bank's units (cached until the bank changes)."""
        self.sync()
        if max_df not in self._common:
            n = max(1, len(self._terms))
            self._common[max_df] = frozenset(t for t, df in self._df.items() if df / n > max_df)
        return self._common[max_df]
