"""All-Mem consolidation tables, read from a run directory's ``system_stats.jsonl`` (one line per dialogue).

- visible surface against the append-only count (paper Fig. 5a, per conversation);
- ATC cost per operator (paper Table 3) and per event / amortised per turn (paper Table 2);
- recoverability of archived units from the visible surface (paper Fig. 6), pooled over dialogues.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from allmem.report.runs import Run
from allmem.report.tables import markdown

OPS = ("diagnosis", "split", "merge", "update")


def surface_table(runs: Sequence[Run]) -> str:
    """Units written (append-only surface = one unit per turn) against the visible surface after consolidation."""
    header = [
        "Method",
        "Dialogue",
        "Append-only (turns)",
        "Units",
        "Visible",
        "Archived",
        "Visible / append-only",
    ]
    rows = []
    for run in runs:
        for did, s in run.stats().items():
            turns, visible = s.get("turns"), s.get("n_visible")
            ratio = 100.0 * visible / turns if turns and visible is not None else None
            rows.append([run.method, did, turns, s.get("n_units"), visible, s.get("n_archived"), ratio])
    return markdown(header, rows)


def atc_cost(run: Run) -> dict[str, Any]:
    """Table 3 rows summed over dialogues, and Table 2's per-event and per-turn figures."""
    table3: dict[str, dict[str, float]] = {op: {} for op in OPS}
    runs = tokens = turns = 0
    latency = 0.0
    for s in run.stats().values():
        atc = s.get("atc") or {}
        for op in OPS:
            for key, value in (atc.get("table3", {}).get(op) or {}).items():
                if isinstance(value, int | float) and not key.endswith("_per_event"):
                    table3[op][key] = table3[op].get(key, 0) + value
        t2 = atc.get("table2") or {}
        runs += int(t2.get("runs", 0))
        tokens += int(t2.get("tokens", 0))
        turns += int(t2.get("turns", 0))
        latency += float(t2.get("latency_ms", 0.0))
    for row in table3.values():
        n = row.get("events", 0)
        row["tokens_per_event"] = row.get("tokens", 0) / n if n else None
        row["latency_ms_per_event"] = row.get("latency_ms", 0) / n if n else None
    table2 = {
        "events": runs,
        "tokens_per_event": tokens / runs if runs else None,
        "latency_s_per_event": latency / 1000 / runs if runs else None,
        "tokens_per_turn": tokens / turns if turns else None,
        "latency_s_per_turn": latency / 1000 / turns if turns else None,
    }
    return {"table3": table3, "table2": table2}


def cost_tables(runs: Sequence[Run]) -> str:
    header3 = ["Method", "Operator", "Events", "Executed", "Skipped", "Noop", "Tokens", "Tokens/event", "Latency s",
               "ms/event"]  # fmt: skip
    rows3, rows2 = [], []
    for run in runs:
        cost = atc_cost(run)
        for op in OPS:
            r = cost["table3"][op]
            latency = r.get("latency_ms")
            rows3.append([run.method, op, r.get("events"), r.get("executed", "-" if op == "diagnosis" else None),
                          r.get("skipped", "-" if op == "diagnosis" else None),
                          r.get("noop", "-" if op == "diagnosis" else None), r.get("tokens"),
                          r.get("tokens_per_event"), latency / 1000 if latency is not None else None,
                          r.get("latency_ms_per_event")])  # fmt: skip
        t2 = cost["table2"]
        rows2.append([run.method, t2["events"], t2["tokens_per_event"], t2["latency_s_per_event"],
                      t2["tokens_per_turn"], t2["latency_s_per_turn"]])  # fmt: skip
    header2 = [
        "Method",
        "ATC events",
        "Tokens/event",
        "s/event",
        "Tokens/turn (amortised)",
        "s/turn (amortised)",
    ]
    return (
        "Per operator (paper Table 3; diagnosis events = units diagnosed):\n\n" + markdown(header3, rows3)
        + "\n\nPer consolidation event and amortised over turns (paper Table 2, ATC rows):\n\n"
        + markdown(header2, rows2)
    )  # fmt: skip


def pooled_recoverability(run: Run) -> dict[str, Any]:
    """R(H) pooled over dialogues, weighted by archived units; median h and H_0.95 read off the pooled curve."""
    total = 0
    curve: dict[int, float] = {}
    unreachable = 0.0
    mode = None
    for s in run.stats().values():
        rec = s.get("recoverability") or {}
        n = int(rec.get("n_archived", 0))
        if not n:
            continue
        mode = rec.get("mode", mode)
        total += n
        unreachable += n * float(rec.get("unreachable_share", 0.0))
        for h, share in rec.get("curve", {}).items():
            curve[int(h)] = curve.get(int(h), 0.0) + n * float(share)
    if not total:
        return {"n_archived": 0}
    pooled = {h: v / total for h, v in sorted(curve.items())}
    median = next((h for h, v in pooled.items() if v >= 0.5), None)
    h95 = next((h for h, v in pooled.items() if v >= 0.95), None)
    return {"n_archived": total, "unreachable_share": unreachable / total, "median_h": median, "h95": h95,
            "curve": pooled, "mode": mode}  # fmt: skip


def recoverability_table(runs: Sequence[Run]) -> str:
    header = [
        "Method",
        "Archived",
        "Unreachable %",
        "Median h",
        "H_0.95",
        "R(1)",
        "R(2)",
        "R(3)",
        "R(4)",
        "mode",
    ]
    rows = []
    for run in runs:
        r = pooled_recoverability(run)
        if not r["n_archived"]:
            rows.append([run.method, 0, None, None, None, None, None, None, None, None])
            continue
        c = r["curve"]
        rows.append([run.method, r["n_archived"], 100 * r["unreachable_share"], r["median_h"], r["h95"],
                     *[100 * c.get(h, 0.0) for h in (1, 2, 3, 4)], r["mode"]])  # fmt: skip
    return markdown(header, rows)


def atc_sections(runs: Sequence[Run]) -> list[str]:
    """Sections for runs whose systems consolidated (their stats carry an ``atc`` summary)."""
    with_atc = [r for r in runs if r.consolidates]
    if not with_atc:
        return []
    return [
        "### Visible surface against the append-only memory\n\n" + surface_table(with_atc),
        "### Consolidation cost (offline backend: token counts of the rendered prompts)\n\n"
        + cost_tables(with_atc),
        "### Recoverability of archived units (directed typed links from the visible surface)\n\n"
        + recoverability_table(with_atc),
    ]


def table3_frame(runs: Sequence[Run]) -> pd.DataFrame:
    """Paper Table 3: one row per run × stage (diagnosis, split, merge, update), from the per-dialogue ATC
    summaries the run wrote into ``system_stats.jsonl`` (``atc_cost``); runs without a consolidation left out."""
    rows = []
    for run in runs:
        cost = atc_cost(run)
        if not cost["table2"]["events"]:
            continue
        t3 = cost["table3"]
        for stage in OPS:
            r = t3.get(stage) or {}
            n = r.get("events") or 0
            rows.append({
                "method": run.method, "dataset": run.dataset, "stage": stage, "events": n,
                "executed": r.get("executed"), "skipped": r.get("skipped"), "noop": r.get("noop"),
                "proposals": r.get("proposals"), "accepted": r.get("accepted"), "tokens": r.get("tokens"),
                "tokens_per_event": r.get("tokens", 0) / n if n else None,
                "latency_ms_per_event": r.get("latency_ms", 0.0) / n if n else None,
                "bank_reused": run.reused_bank,
            })  # fmt: skip
    return pd.DataFrame(rows)


def table3_markdown(table: pd.DataFrame) -> str:
    header = ["Method", "Stage", "Events", "Executed", "Skipped", "No-op", "Proposals → accepted", "Tokens/event",
              "ms/event"]  # fmt: skip
    rows = []
    for _, r in table.iterrows():
        diag = r["stage"] == "diagnosis"

        def num(key: str, digits: int = 0, r: pd.Series = r) -> str:
            v = r[key]
            return "–" if v is None or pd.isna(v) else f"{float(v):,.{digits}f}"

        rows.append([r["method"], r["stage"], num("events"), "–" if diag else num("executed"),
                     "–" if diag else num("skipped"), "–" if diag else num("noop"),
                     f"{num('proposals')} → {num('accepted')}" if diag else "–", num("tokens_per_event"),
                     num("latency_ms_per_event", 1)])  # fmt: skip
    return markdown(header, rows)
