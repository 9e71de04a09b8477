"""Incremental Okapi BM25 over a bank surface: the lexical Stage 1 scorer and its hybrid (RRF) partner.

Why our own index rather than rank-bm25: that library rebuilds its statistics from scratch, and a memory bank
changes after every turn (new units, archived units, refreshed descriptors). This index follows the bank's change
log and touches only the units that changed. Statistics (N, df, average length) are those of the searched
surface, so archived units that enter at Stage 2 are scored against the same collection.

BM25 with Lucene's non-negative idf: idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5));
score(q, d) = sum over query tokens t of idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl)).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from allmem.memory.bank import MemoryBank, Unit
from allmem.text import content_words

FIELDS = ("descriptor", "evidence", "both")


def tokenize(text: str) -> list[str]:
    """Lowercased words minus stop words: the same preprocessing as the BM25 baseline (allmem.text)."""
    return content_words(text)


def unit_text(unit: Unit, field: str) -> str:
    if field == "descriptor":
        return unit.descriptor_text()
    if field == "evidence":
        return unit.evidence_text()
    return f"{unit.descriptor_text()}\n{unit.evidence_text()}"


class BM25Index:
    """BM25 over the visible surface (or the full bank), kept in step with the bank's change log."""

    def __init__(
        self,
        bank: MemoryBank,
        surface: str = "visible",
        field: str = "descriptor",
        k1: float = 1.2,
        b: float = 0.75,
    ) -> None:
        if field not in FIELDS:
            raise ValueError(f"retrieval.bm25.field must be one of {FIELDS}, got {field!r}")
        if surface not in ("visible", "full"):
            raise ValueError(f"retrieval.surface must be 'visible' or 'full', got {surface!r}")
        self.bank, self.surface, self.field, self.k1, self.b = bank, surface, field, k1, b
        self._tf: dict[
            str, Counter[str]
        ] = {}  # every unit, member or not (Stage 3 scores archived units too)
        self._members: set[str] = set()
        self._postings: dict[str, set[str]] = {}
        self._df: Counter[str] = Counter()
        self._total_len = 0
        self._pos = 0

    def sync(self) -> None:
        """Apply the bank changes since the last sync: re-tokenise touched units, reconcile membership."""
        if self._pos == self.bank.revision:
            return
        touched = dict.fromkeys(uid for _, uid in self.bank.changes_since(self._pos))
        self._pos = self.bank.revision
        for uid in touched:
            if uid in self._members:
                self._remove(uid)
            unit = self.bank.get(uid)
            self._tf[uid] = Counter(tokenize(unit_text(unit, self.field)))
            if self.surface == "full" or unit.visible:
                self._add(uid)

    def _add(self, uid: str) -> None:
        tf = self._tf[uid]
        self._members.add(uid)
        self._total_len += sum(tf.values())
        for term in tf:
            self._df[term] += 1
            self._postings.setdefault(term, set()).add(uid)

    def _remove(self, uid: str) -> None:
        tf = self._tf[uid]
        self._members.discard(uid)
        self._total_len -= sum(tf.values())
        for term in tf:
            self._df[term] -= 1
            self._postings[term].discard(uid)

    def _idf(self, term: str) -> float:
        n, df = len(self._members), self._df.get(term, 0)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def _doc_score(self, q_terms: Counter[str], uid: str, avgdl: float) -> float:
        tf = self._tf[uid]
        dl = sum(tf.values())
        norm = self.k1 * (1 - self.b + self.b * dl / avgdl) if avgdl > 0 else self.k1
        s = 0.0
        for term, qn in q_terms.items():
            f = tf.get(term, 0)
            if f:
                s += qn * self._idf(term) * f * (self.k1 + 1) / (f + norm)
        return s

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        """Top-k surface units with a positive score, best first (ties: older unit first)."""
        self.sync()
        q_terms = Counter(tokenize(query))
        if not self._members or not q_terms:
            return []
        avgdl = self._total_len / len(self._members)
        hits: set[str] = set()
        for term in q_terms:
            hits |= self._postings.get(term, set())
        scored = [(uid, self._doc_score(q_terms, uid, avgdl)) for uid in hits]
        scored.sort(key=lambda x: (-x[1], x[0]))
        return scored[:k]

    def score(self, query: str, ids: Sequence[str]) -> list[float]:
        """BM25 of arbitrary units (archived ones included) against the surface statistics."""
        self.sync()
        q_terms = Counter(tokenize(query))
        avgdl = self._total_len / len(self._members) if self._members else 0.0
        return [self._doc_score(q_terms, uid, avgdl) for uid in ids]
