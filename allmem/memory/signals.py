"""Query-side and topology signals of All-Mem's fused retrieval (``allmem_hybrid``), kept apart from the stages.

- ``neighbour_scores``: Stage 3's share of a linked candidate's score (why: ``allmem.memory.retrieve``).
- ``common_word_filter``: the dense query without words too common in the bank to tell units apart.
- ``query_periods`` / ``PeriodIndex``: the months and years a query names, and which units fall in them.
Each is a general rule about conversational memory, not about one benchmark; each has a weight in the method
config, 0 / null switching it off.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import numpy as np

from allmem.memory.bank import LINK_TYPES, MemoryBank
from allmem.text import asks_question, index_terms

REPLY = "reply"  # Stage 3 neighbour weight of a temporal link whose source asks a question
_TEMPORAL = LINK_TYPES.index("temporal")
MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
# Capitalised month names only: "may" the verb must not open a window. A year may follow ("May 2022", "May, 2022").
_MONTH_RE = re.compile(r"\b(" + "|".join(MONTHS) + r")\b(?:\s*,?\s*((?:19|20)\d{2})\b)?")
_YEAR_RE = re.compile(r"\b(?:19|20)\d{2}\b")
_WORD = re.compile(r"[A-Za-z0-9]+")


class LinkIndex:
    """Every unit's in- and out-links (all types) as CSR arrays over bank rows, and which units ask a question.

    Why arrays: Stage 3's neighbour term looks at every link of every candidate; done in Python per link it
    would cost more than the paper's whole retrieval. Rebuilt when the bank's unit revision or link counter
    moved (every link change the bank makes, a cap drop or a rewire included, comes with a new link number);
    the rebuild is index upkeep, not query latency.
    """

    def __init__(self, bank: MemoryBank) -> None:
        self.bank = bank
        self._key: tuple[int, int] | None = None
        empty = np.zeros(0, dtype=np.int64)
        self._csr = (np.zeros(1, dtype=np.int64), empty, empty)  # (ptr, other, side code) over bank rows
        self._weighted: tuple[Any, np.ndarray] = (None, np.zeros(0))  # (key, weight of each CSR entry)
        self.asks = np.zeros(0, dtype=bool)  # by row: the unit's evidence asks a question
        self._degree = np.zeros(0, dtype=np.int64)  # by row: links seen from it (both sides)
        self._slot = np.zeros(0, dtype=np.int64)  # by row: -1, or a candidate's position during ``positions``

    def sync(self) -> None:
        key = (self.bank.revision, self.bank.link_seq)
        if key == self._key:
            return
        n = len(self.bank)
        if len(self.asks) < n:
            ids = self.bank.full_ids_at(range(len(self.asks), n))
            fresh = [asks_question(self.bank.get(uid).evidence_text()) for uid in ids]
            self.asks = np.concatenate([self.asks, np.array(fresh, dtype=bool)])
        links = self.bank.links()  # never a self-link: the bank refuses them on add and on load
        code = np.array([LINK_TYPES.index(lk.type) for lk in links], dtype=np.int64)
        src = self.bank.rows_of([lk.src for lk in links])
        dst = self.bank.rows_of([lk.dst for lk in links])
        # one table for both directions: code t for a link u -> c seen from c, t + len(LINK_TYPES) from u
        keys = np.concatenate([dst, src])
        other = np.concatenate([src, dst])
        codes = np.concatenate([code, code + len(LINK_TYPES)])
        self._csr = _csr(keys, other, codes, n)
        self._degree = np.diff(self._csr[0])
        self._slot = np.full(n, -1, dtype=np.int64)
        self._key = key

    def neighbours(
        self, rows: np.ndarray, weights: np.ndarray, reply: float = 0.0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Triples (i, row, weight), one per link between ``rows[i]`` and ``row``: a link ``row -> rows[i]`` of
        type LINK_TYPES[t] weighs ``weights[t]`` (``reply`` instead for a temporal one whose source asks a
        question), a link ``rows[i] -> row`` weighs ``weights[t + 4]`` (``neighbour_weights``'s layout).

        Why weights and not type codes: the weight of a link depends only on the bank and the config, so it is
        worked out once per bank state and read per query.
        """
        ptr, other, _ = self._csr
        starts = ptr[rows]
        lens = self._degree[rows]
        # array methods, not np.cumsum / np.repeat: their Python wrappers cost more than the work here
        ends = lens.cumsum()
        owner = np.arange(len(rows)).repeat(lens)
        at = (starts - ends + lens).repeat(lens) + np.arange(int(ends[-1]) if len(ends) else 0)
        return owner, other[at], self._link_weights(weights, reply)[at]

    def _link_weights(self, weights: np.ndarray, reply: float) -> np.ndarray:
        """The weight of every CSR entry (see ``neighbours``), cached for this bank state and these weights."""
        key = (self._key, weights.tobytes(), reply)
        if self._weighted[0] != key:
            _, other, code = self._csr
            w = weights[code]
            if reply:
                w = np.where((code == _TEMPORAL) & self.asks[other], reply, w)
            self._weighted = (key, w)
        return self._weighted[1]

    def positions(self, rows: np.ndarray, of: np.ndarray) -> np.ndarray:
        """For each row in ``of``, its position in ``rows`` (distinct bank rows), or -1 when it is not there.

        A lookup table by row, filled for ``rows`` and cleared again: O(len(rows) + len(of)) per call, with no
        sort and no allocation of the bank's size. Not reentrant (one query at a time, as a Retriever works).
        """
        slot = self._slot
        slot[rows] = np.arange(len(rows))
        try:
            return slot[of]
        finally:
            slot[rows] = -1


def _csr(keys: np.ndarray, values: np.ndarray, code: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    order = np.argsort(keys, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr, values[order], code[order]


def neighbour_weights(
    forward: Mapping[str, float], backward: Mapping[str, float] | None = None
) -> tuple[np.ndarray, float]:
    """The weight of each LinkIndex side code (``forward`` by type, then ``backward``) and the reply weight."""
    fwd = dict(forward)
    reply = float(fwd.pop(REPLY, 0.0) or 0.0)
    back = dict(backward or {})
    weights = [float(fwd.get(t, 0.0) or 0.0) for t in LINK_TYPES] + [
        float(back.get(t, 0.0) or 0.0) for t in LINK_TYPES
    ]
    return np.array(weights, dtype=np.float64), reply


def neighbour_bonus(
    links: LinkIndex, rows: np.ndarray, scores: np.ndarray, weights: np.ndarray, reply: float = 0.0
) -> np.ndarray:
    """``scores[i]`` plus the best ``weight * scores[j]`` over candidates j linked with i, floored at 0.

    ``rows``/``scores``: the candidates (bank rows, distinct) and their Stage 1 scores; ``weights``/``reply``
    from ``neighbour_weights``. A forward weight of type t weighs a candidate u with a link ``u -> c`` (u can
    have brought c in: for a temporal link, u is the turn before c); a backward weight weighs u with ``c -> u``
    (for a temporal link, the turn after c). ``reply`` replaces the forward temporal weight when u asks a
    question: c is then the reply, where the asked-for information lives (question-answer adjacency pairs,
    Schegloff and Sacks 1973). Link types without a weight do not count.
    """
    if not (reply or weights.any()) or not len(rows):
        return scores.copy()
    links.sync()
    owner, other, w = links.neighbours(rows, weights, reply)
    j = links.positions(rows, other)  # the linked unit's candidate position, -1 if it is no candidate
    hit = j >= 0
    bonus = np.zeros(len(rows), dtype=np.float64)
    np.maximum.at(bonus, owner[hit], w[hit] * scores[j[hit]])
    return scores + bonus


def neighbour_scores(
    bank: MemoryBank,
    base: Mapping[str, float],
    forward: Mapping[str, float],
    backward: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """``neighbour_bonus`` over unit ids: {candidate: Stage 1 score} -> {candidate: Stage 3 score}."""
    ids = list(base)
    rows = bank.rows_of(ids)
    scores = np.fromiter(base.values(), dtype=np.float64, count=len(ids))
    out = neighbour_bonus(LinkIndex(bank), rows, scores, *neighbour_weights(forward, backward))
    return dict(zip(ids, out.tolist(), strict=True))


def common_word_filter(query: str, common: frozenset[str]) -> str:
    """``query`` without the words whose index term is in ``common``; the query itself if nothing would be left."""
    if not common:
        return query
    kept = _WORD.sub(lambda m: "" if _is_common(m.group(0), common) else m.group(0), query)
    kept = re.sub(r"\s+", " ", kept).strip()
    return kept if _WORD.search(kept) else query


def _is_common(word: str, common: frozenset[str]) -> bool:
    terms = index_terms(word)
    return len(terms) == 1 and terms[0] in common


Period = tuple[int | None, int | None]  # (year, month); None: any


def query_periods(query: str) -> list[Period]:
    """The months (with their year, when given) and, failing any month, the years a query names.

    "in May 2022" -> [(2022, 5)]; "last May" -> [(None, 5)]; "in 2022" -> [(2022, None)]. Days are not kept:
    a question that names a day names its month, and a memory's date is the date of its session.
    """
    months = [(int(y) if y else None, MONTHS.index(m) + 1) for m, y in _MONTH_RE.findall(query)]
    if months:
        return months
    return [(int(y), None) for y in _YEAR_RE.findall(query)]


def in_periods(ts: datetime | None, periods: list[Period]) -> bool:
    if ts is None:
        return False
    return any((y is None or ts.year == y) and (m is None or ts.month == m) for y, m in periods)


class PeriodIndex:
    """Year and month of every unit, by bank row, kept in step with the bank (timestamps never change)."""

    def __init__(self, bank: MemoryBank) -> None:
        self.bank = bank
        self._year = np.zeros(0, dtype=np.int32)
        self._month = np.zeros(0, dtype=np.int32)

    def mask(self, periods: list[Period], rows: np.ndarray | None = None) -> np.ndarray:
        """Whether each of ``rows`` (None: every unit) falls in one of ``periods``."""
        n = len(self.bank)
        if len(self._year) < n:
            new = [self.bank.get(uid).timestamp for uid in self.bank.full_ids_at(range(len(self._year), n))]
            self._year = np.concatenate([self._year, np.array([t.year for t in new], dtype=np.int32)])
            self._month = np.concatenate([self._month, np.array([t.month for t in new], dtype=np.int32)])
        year, month = (self._year, self._month) if rows is None else (self._year[rows], self._month[rows])
        hit = np.zeros(len(year), dtype=bool)
        for y, m in periods:
            hit |= (year == y if y is not None else True) & (month == m if m is not None else True)
        return hit
