"""Per-item scores → the summary stored in ``metrics.json`` and printed by ``allmem score``.

Values are means ×100 kept at full float precision (rounding is for display only), overall and per group,
each with the number of items behind it. Means use ``math.fsum`` so the result does not depend on the order
of the records: the runner and ``allmem score`` must agree exactly.

The judge column (4o-J) is ``100 × yes / (yes + no)``; invalid verdicts are left out of the denominator,
counted and rated (``judge_invalid_rate``; above ``allmem.metrics.judge.INVALID_WARN_RATE`` the run warns and the
tables' footer flags it). When no record carries a verdict the judge is ``None`` with a reason: an offline run never gets a
proxy number in that column.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from allmem.metrics.protocols import VERDICTS, Protocol

NO_JUDGE_REASON = "no LLM judge ran (offline backend)"
NO_JUDGED_IN_GROUP = "no judged records in this group"


def _natural_key(key: str) -> tuple[Any, ...]:
    """Sort "2" before "10" and numbers before names, so the group order is stable and readable."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", key) if p)


def means(
    items: Sequence[Mapping[str, float | None]], names: Sequence[str]
) -> tuple[dict[str, float | None], dict[str, int]]:
    """Per metric name: the mean ×100 over the items that have a value (None: none has) and their count."""
    scores: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    for name in names:
        vals = [v for item in items if (v := item.get(name)) is not None]
        counts[name] = len(vals)
        scores[name] = 100.0 * math.fsum(vals) / len(vals) if vals else None
    return scores, counts


def _block(
    items: Sequence[Mapping[str, float | None]],
    verdicts: Sequence[str | None],
    names: Sequence[str],
    any_judge: bool,
) -> dict[str, Any]:
    """Means ×100 and counts for one set of items (overall or one group)."""
    scores, counts = means(items, names)
    tally = {v: sum(1 for x in verdicts if x == v) for v in VERDICTS}
    tally["missing"] = sum(1 for x in verdicts if x is None)
    decided = tally["yes"] + tally["no"]
    out: dict[str, Any] = {"count": len(items), "scores": scores, "n": counts}
    out["judge"] = 100.0 * tally["yes"] / decided if decided else None
    out["judge_counts"] = tally
    judged = decided + tally["invalid"]  # invalid verdicts: counted and rated, never silently dropped
    out["judge_invalid_rate"] = tally["invalid"] / judged if judged else None
    if out["judge"] is None:
        out["judge_reason"] = NO_JUDGED_IN_GROUP if any_judge else NO_JUDGE_REASON
    return out


def summarise(records: Sequence[Mapping[str, Any]], protocol: Protocol) -> dict[str, Any]:
    """Score validated records under ``protocol`` and aggregate, overall and per group.

    ``records`` are normalised by ``protocols.validate_record``. Items the protocol excludes (e.g. LoCoMo
    category 5 under ``mem0``) are counted in ``n_excluded`` and scored nowhere.
    """
    names = protocol.metric_names()
    kept = [r for r in records if protocol.includes(r)]
    items = [protocol.score_item(r) for r in kept]
    verdicts = [r["verdict"] for r in kept]
    keys = [protocol.group_key(r) for r in kept]
    any_judge = any(v is not None for v in verdicts)

    groups: dict[str, dict[str, Any]] = {}
    for key in sorted(set(keys), key=_natural_key):
        idx = [i for i, k in enumerate(keys) if k == key]
        groups[key] = _block([items[i] for i in idx], [verdicts[i] for i in idx], names, any_judge)

    return {
        "protocol": protocol.name,
        "ks": list(protocol.ks),
        "table_k": protocol.table_k,
        "metrics": names,
        "table_metrics": protocol.table_metrics(),
        "n_records": len(records),
        "n_scored": len(kept),
        "n_excluded": len(records) - len(kept),
        "overall": _block(items, verdicts, names, any_judge),
        "groups": groups,
    }
