"""Retrieval metrics over ranked source ids, and the step that turns ranked units into ranked source ids.

Memory systems return ranked *units* (a turn, a fact, a merged summary); the benchmarks label *source ids*
(LoCoMo's turns; LongMemEval's sessions). A unit's source ids are turn ids on every dataset (LoCoMo ``D3:5``,
LongMemEval ``<session id>:<turn index>``); ``rank_source_ids`` is the one bridge from units to ranked ids, so every
system is credited the same way, and ``session_ranking`` credits each ranked turn to its session where the gold
names sessions (LongMemEval).

Conventions (documented because the papers differ):
- Ranked ids are de-duplicated keeping the first occurrence: the list is already best-first, so a repeated id
  can only move an id down, never up, and counting it twice would inflate recall.
- Gold ids use set semantics: a gold id listed twice (LoCoMo conv-50 has ``['D4:5', 'D4:5', 'D5:5']``) is
  one id, so ``|gold|`` is the number of distinct ids. Order of first appearance is kept for determinism.
- Gold ids are compared as raw strings; the 9 LoCoMo evidence strings that match no turn simply never match.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from allmem.types import Retrieved


def dedupe(ids: Iterable[str]) -> list[str]:
    """Distinct ids in order of first appearance."""
    seen: set[str] = set()
    out: list[str] = []
    for i in ids:
        if i not in seen:
            seen.add(i)
            out.append(i)
    return out


def session_of(source_id: str) -> str:
    """The session of a source id: ``D3:5`` → ``D3`` (LoCoMo turn), ``<session>:<j>`` → ``<session>`` (LongMemEval
    turn); an id without a ``:<number>`` tail is a session id already (LongMemEval records of version 5 and
    earlier ranked sessions)."""
    head, sep, tail = source_id.rpartition(":")
    return head if sep and tail.isdigit() else source_id


def session_ranking(ranked: Iterable[str]) -> list[str]:
    """Ranked turn ids → ranked sessions: each session at the place of its best turn."""
    return dedupe(session_of(s) for s in ranked)


def kept_ranking(ranked: Sequence[str], n: int, sessions: int) -> list[str]:
    """The ranked ids a record keeps: the first ``n``, and more until they span ``sessions`` sessions (or the list
    ends), so a session-level cut-off of up to ``sessions`` reads the same from the kept ids as from all."""
    seen: set[str] = set()
    for i, sid in enumerate(ranked):
        seen.add(session_of(sid))
        if i + 1 >= n and len(seen) >= sessions:
            return list(ranked[: i + 1])
    return list(ranked)


def rank_source_ids(units: Sequence[Retrieved]) -> list[str]:
    """Ranked units → ranked source ids.

    Each source id takes the best score of any unit holding it (a merged unit credits all its source ids);
    ids are sorted by that score, descending, ties kept in order of first appearance in ``units``.
    """
    best: dict[str, float] = {}
    first: dict[str, int] = {}
    for unit in units:
        for sid in unit.source_ids:
            if sid not in first:
                first[sid] = len(first)
                best[sid] = unit.score
            elif unit.score > best[sid]:
                best[sid] = unit.score
    return sorted(first, key=lambda sid: (-best[sid], first[sid]))


# ---------------------------------------------------------------------------------------------------------
# Protocol allmem: R@k and N@k
# ---------------------------------------------------------------------------------------------------------


def recall_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """|gold ∩ top-k| / |gold| over distinct ids; 0 when there is no gold (the item still counts)."""
    gold_set = set(gold)
    if not gold_set:
        return 0.0
    top = set(dedupe(ranked)[:k])
    return len(gold_set & top) / len(gold_set)


def ndcg_at_k(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """Binary-relevance NDCG: DCG = Σ rel_i / log2(i+1) over the top k, IDCG over min(|gold|, k) hits."""
    gold_set = set(gold)
    if not gold_set:
        return 0.0
    top = dedupe(ranked)[:k]
    dcg = sum(1.0 / math.log2(i + 1) for i, sid in enumerate(top, start=1) if sid in gold_set)
    idcg = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(gold_set), k) + 1))
    return dcg / idcg


def recall_key(k: int) -> str:
    """The name of recall at ``k`` (``R@5``) in records, metrics.json, tables and figures: stated here only."""
    return f"R@{k}"


def ndcg_key(k: int) -> str:
    """The name of nDCG at ``k`` (``N@5``), as ``recall_key``."""
    return f"N@{k}"


def allmem_retrieval(ranked: Sequence[str], gold: Iterable[str], ks: Sequence[int]) -> dict[str, float]:
    """``R@k`` and ``N@k`` for every k, in the order R@k1, N@k1, R@k2, ..."""
    gold_ids = dedupe(gold)
    ranked_ids = dedupe(ranked)
    out: dict[str, float] = {}
    for k in ks:
        out[recall_key(k)] = recall_at_k(ranked_ids, gold_ids, k)
        out[ndcg_key(k)] = ndcg_at_k(ranked_ids, gold_ids, k)
    return out


# ---------------------------------------------------------------------------------------------------------
# Protocol longmemeval: the official recall_any / recall_all / ndcg_any
# ---------------------------------------------------------------------------------------------------------


def _lme_dcg(relevances: Sequence[float]) -> float:
    """LongMemEval's DCG: ranks 1 and 2 both weigh 1, then rank i weighs 1/log2(i)."""
    return sum(rel if i == 1 else rel / math.log2(i) for i, rel in enumerate(relevances, start=1))


def longmemeval_ndcg(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    """Official ``ndcg_any@k``: ideal ranking puts min(|gold|, k) relevant ids first; 0 with no gold."""
    gold_set = set(gold)
    ideal = _lme_dcg([1.0] * min(len(gold_set), k))
    if ideal == 0:
        return 0.0
    top = dedupe(ranked)[:k]
    return _lme_dcg([1.0 if sid in gold_set else 0.0 for sid in top]) / ideal


def longmemeval_retrieval(ranked: Sequence[str], gold: Iterable[str], ks: Sequence[int]) -> dict[str, float]:
    """``recall_any@k`` (any gold in top k), ``recall_all@k`` (every gold in top k), ``ndcg_any@k``.

    With no gold the official code gives recall_any 0 and recall_all 1 (``all`` of nothing); we keep that
    so numbers match the official script, though LongMemEval has no such non-abstention item.
    """
    gold_ids = dedupe(gold)
    ranked_ids = dedupe(ranked)
    out: dict[str, float] = {}
    for k in ks:
        top = set(ranked_ids[:k])
        out[f"recall_any@{k}"] = float(any(g in top for g in gold_ids))
        out[f"recall_all@{k}"] = float(all(g in top for g in gold_ids))
        out[f"ndcg_any@{k}"] = longmemeval_ndcg(ranked_ids, gold_ids, k)
    return out


def is_abstention(question_id: str) -> bool:
    """LongMemEval abstention questions carry ``_abs`` in their id (the official test is a substring)."""
    return "_abs" in question_id
