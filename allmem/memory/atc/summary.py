"""Summarise ``atc_events.jsonl`` into the paper's Table 3 (per operator) and Table 2 (ATC per event, per turn).

Definitions (paper, Sec. 4.5 and App.): an ATC *event* is one consolidation run; its cost is the sum of its
diagnosis and planning calls (tokens in + out) and its wall-clock time. Amortised per turn = the total over all
runs divided by the turns those runs covered (each run line records ``turns_since_last``). Per operator, an
event is one queued target; tokens and latency are its planning calls (Split includes sibling descriptors).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from allmem.memory.atc.config import OPS
from allmem.memory.atc.events import read_events

STATES = ("executed", "skipped", "noop")


def _mean(total: float, n: int) -> float | None:
    return round(total / n, 3) if n else None


def summarise_events(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Table 3 rows (``diagnosis``, ``split``, ``merge``, ``update``), Table 2 ATC figures and surface sizes."""
    events = list(events)
    rows: dict[str, dict[str, Any]] = {}
    diag = [e for e in events if e["kind"] == "diagnose"]
    rows["diagnosis"] = {
        "events": sum(int(e.get("units", 0)) for e in diag),
        "proposals": sum(int(e.get("proposals", 0)) for e in diag),
        "accepted": sum(int(e.get("accepted", 0)) for e in diag),
        "failed": sum(sum(e.get("failed", {}).values()) for e in diag),
        "tokens": sum(int(e.get("tokens", 0)) for e in diag),
        "latency_ms": round(sum(float(e.get("latency_ms", 0.0)) for e in diag), 3),
    }
    rows["diagnosis"]["tokens_per_event"] = _mean(rows["diagnosis"]["tokens"], rows["diagnosis"]["events"])
    for op in OPS:
        ts = [e for e in events if e["kind"] == "target" and e.get("op") == op]
        row: dict[str, Any] = {"events": len(ts)}
        for s in STATES:
            row[s] = sum(1 for e in ts if e.get("state") == s)
        row["tokens"] = sum(int(e.get("tokens", 0)) for e in ts)
        row["latency_ms"] = round(sum(float(e.get("latency_ms", 0.0)) for e in ts), 3)
        row["tokens_per_event"] = _mean(row["tokens"], len(ts))
        row["latency_ms_per_event"] = _mean(row["latency_ms"], len(ts))
        rows[op] = row
    runs = [e for e in events if e["kind"] == "run"]
    turns = sum(int(e.get("turns_since_last", 0)) for e in runs)
    tokens = sum(int(e.get("tokens", 0)) for e in runs)
    latency = sum(float(e.get("latency_ms", 0.0)) for e in runs)
    last: dict[str, dict[str, Any]] = {}
    for e in runs:  # the final surface of each dialogue: its last run line
        last[str(e.get("dialogue", ""))] = e
    surface = {
        d: {"n_units": e.get("n_units"), "n_visible": e.get("n_visible"), "turns": e.get("turn")}
        for d, e in last.items()
    }
    return {
        "table3": rows,
        "table2": {
            "runs": len(runs),
            "turns": turns,
            "tokens": tokens,
            "latency_ms": round(latency, 3),
            "tokens_per_event": _mean(tokens, len(runs)),
            "latency_ms_per_event": _mean(latency, len(runs)),
            "tokens_per_turn": _mean(tokens, turns),
            "latency_ms_per_turn": _mean(latency, turns),
        },
        "surface": surface,
    }


def summarise_run_dir(run_dir: str | Path) -> dict[str, Any]:
    """The summary of one run directory's ``atc_events.jsonl`` (see :func:`summarise_events`)."""
    return summarise_events(read_events(run_dir))


def table3_markdown(summary: dict[str, Any]) -> str:
    """Table 3 as a Markdown table: events, outcomes, tokens and latency per operator."""
    head = "| stage | events | executed | skipped | noop | tokens | tokens/event | latency ms/event |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    d = summary["table3"]["diagnosis"]
    lines.append(
        f"| diagnosis | {d['events']} | - | - | - | {d['tokens']} | {d['tokens_per_event']} | "
        f"{_mean(d['latency_ms'], d['events'])} |"
    )
    for op in OPS:
        r = summary["table3"][op]
        lines.append(
            f"| {op} | {r['events']} | {r['executed']} | {r['skipped']} | {r['noop']} | {r['tokens']} | "
            f"{r['tokens_per_event']} | {r['latency_ms_per_event']} |"
        )
    t2 = summary["table2"]
    lines.append("")
    lines.append(
        f"ATC: {t2['runs']} events over {t2['turns']} turns; per event {t2['tokens_per_event']} tokens, "
        f"{t2['latency_ms_per_event']} ms; amortised per turn {t2['tokens_per_turn']} tokens, "
        f"{t2['latency_ms_per_turn']} ms."
    )
    return "\n".join(lines)
