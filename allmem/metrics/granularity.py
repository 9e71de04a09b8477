"""Retrieval at every granularity, stated: one implementation for LoCoMo and LongMemEval (docs/PROTOCOL.md,
"Retrieval at every granularity").

For one question, from its ranked source ids (best first), the source ids of each of its top units, and its gold
evidence, at cut-off k:

- at **turn** level (gold: evidence turns; ranked: the ranked source ids) and at **session** level (both mapped to
  their session, ``session_of``; the ranked sessions de-duplicated keeping the first, i.e. best, place):
  ``any`` (1 when any gold id is in the top k), ``all`` (1 when every gold id is), ``recall`` (the share of the
  gold ids in the top k: the paper's R@k at turn level) and ``ndcg`` (binary relevance, DCG = Σ rel_i / log2(i+1)
  over the top k, normalised by the ideal over min(|gold|, k): the paper's N@k at turn level);
- **unit precision** ``p`` (the share of the top k *returned units*, not ids, that hold any gold id; k in the
  denominator, so fewer than k units count the missing places as misses). A merged unit holding three evidence
  turns is one relevant unit here, where the id-level recall credits it three times.

Ranked ids and units hold turn ids on every dataset (LoCoMo ``D3:5``; LongMemEval ``<session id>:<turn index>``,
gold turns its ``has_answer`` turns, ``Prediction.evidence_turns``). LongMemEval records of version 5 and earlier
ranked sessions: there the turn level is not measured (None; ``turn_level=False``) and unit precision is at session
level. A question without gold ids at a level has no value there (None): it is left out of these means and of their
counts, unlike the paper's R@k, which scores it 0.

Every run's ``metrics.json`` holds these means under ``granularity`` (``summary``, written by
``allmem.metrics.score_records``, so the runner and ``allmem score`` agree), and the retrieval table reads them
from there (``allmem/report/tables/retrieval.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from allmem.metrics.aggregate import means
from allmem.metrics.retrieval import dedupe, is_abstention, session_of

if TYPE_CHECKING:
    from allmem.metrics.protocols import Protocol

LEVELS = ("turn", "session")
MEASURES = ("any", "all", "recall", "ndcg")
KEY = "granularity"  # the block of metrics.json that holds ``summary``


def _at_k(ranked: Sequence[str], gold: set[str], k: int) -> dict[str, float]:
    top = ranked[:k]
    hits = [sid in gold for sid in top]
    dcg = sum(1.0 / math.log2(i + 1) for i, hit in enumerate(hits, start=1) if hit)
    idcg = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(gold), k) + 1))
    found = gold & set(top)
    return {
        "any": float(bool(found)),
        "all": float(found == gold),
        "recall": len(found) / len(gold),
        "ndcg": dcg / idcg,
    }


def granular(
    ranked_ids: Sequence[str],
    units: Sequence[Iterable[str]],
    gold_turns: Iterable[str],
    gold_sessions: Iterable[str],
    ks: Sequence[int],
    turn_level: bool = True,
) -> dict[str, float | None]:
    """``<level>_<measure>@k`` and ``P@k`` for every k (None where not measurable, see the module docstring).

    ``gold_turns``: evidence turn ids (empty when unknown); ``gold_sessions``: evidence sessions (LoCoMo: derived
    from the turns when empty); ``turn_level``: whether ``ranked_ids`` and ``units`` hold turn ids."""
    turns = set(gold_turns)
    sessions = set(gold_sessions) or {session_of(t) for t in turns}
    ranked = dedupe(ranked_ids)
    ranked_sessions = dedupe(session_of(s) for s in ranked)
    unit_sets = [set(u) if turn_level else {session_of(s) for s in u} for u in units]
    unit_gold = turns if turn_level else sessions
    out: dict[str, float | None] = {}
    for k in ks:
        for level, gold, ids in (("turn", turns, ranked), ("session", sessions, ranked_sessions)):
            usable = gold and (level == "session" or turn_level)
            values = _at_k(ids, gold, k) if usable else dict.fromkeys(MEASURES)
            out.update({f"{level}_{m}@{k}": values[m] for m in MEASURES})
        out[f"P@{k}"] = sum(1 for u in unit_sets[:k] if u & unit_gold) / k if unit_gold else None
    return out


def names(ks: Sequence[int]) -> list[str]:
    """The metric names ``granular`` returns, in order."""
    return [n for k in ks for n in (*(f"{lv}_{m}@{k}" for lv in LEVELS for m in MEASURES), f"P@{k}")]


def record_values(
    record: Mapping[str, Any], ks: Sequence[int], turn_level: bool = True
) -> dict[str, float | None]:
    """``granular`` for one validated record (``Prediction.scoring_view``): LongMemEval's (a ``question_type``)
    gold turns are its ``evidence_turns`` and its gold sessions its ``evidence``; every other dataset's
    ``evidence`` names turns. A record without ``ranked_units`` (records version 1) has no unit precision."""
    lme = record.get("question_type") is not None
    values = granular(
        record["ranked_source_ids"], record.get("ranked_units") or (),
        record.get("evidence_turns") or () if lme else record["evidence"], record["evidence"] if lme else (),
        ks, turn_level=turn_level or not lme,
    )  # fmt: skip
    if not record.get("ranked_units"):
        values.update({f"P@{k}": None for k in ks})
    return values


def ranks_turns(records: Iterable[Mapping[str, Any]]) -> bool:
    """Whether LongMemEval records rank turn ids (records version 6 on: ``<session id>:<turn index>``) rather
    than sessions (version 5 and earlier), read from the ranked ids themselves."""
    return any(
        session_of(sid) != sid
        for r in records
        if r.get("question_type") is not None
        for sid in r["ranked_source_ids"]
    )


def summary(records: Sequence[Mapping[str, Any]], protocol: Protocol) -> dict[str, Any]:
    """The ``granularity`` block of ``metrics.json``: over the validated ``records`` the protocol scores, less
    LongMemEval's abstention questions, the mean ×100 (``scores``) and the questions with a value (``n``) of every
    ``names(protocol.ks)``; ``levels``: the granularities the records measure (``turn``, ``session``, ``unit``),
    ``count``: the questions considered."""
    kept = [r for r in records if protocol.includes(r) and not is_abstention(r["question_id"])]
    turn_ids = ranks_turns(kept)
    scores, n = means([record_values(r, protocol.ks, turn_ids) for r in kept], names(protocol.ks))
    measured = {"turn": "turn_any", "session": "session_any", "unit": "P"}
    return {
        "ks": list(protocol.ks),
        "levels": [lv for lv, m in measured.items() if any(n[f"{m}@{k}"] for k in protocol.ks)],
        "count": len(kept),
        "scores": scores,
        "n": n,
    }
