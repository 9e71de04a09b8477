"""Markdown tables built only from run directories (metrics.json, predictions.jsonl, config.yaml)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from allmem.metrics import score_records
from allmem.report.runs import Run, find_runs
from benchmarks import fit_split

__all__ = ["Run", "find_runs", "fmt", "group_table", "main_table", "markdown", "split_table"]

MAIN_COLUMNS = (("F1", "f1"), ("BLEU-1", "bleu1"), ("ROUGE-L", "rougeL"), ("R@k", "R@{k}"), ("N@k", "N@{k}"))


def fmt(value: Any) -> str:
    """Means are stored ×100 unrounded; round for display only. Missing values print as n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def markdown(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def main_table(runs: Sequence[Run]) -> str:
    """Methods × F1, BLEU-1, ROUGE-L, R@k, N@k, 4o-J (n/a when no LLM judged); k is each run's protocol
    ``table_k`` (5 by default; the header says which, or ``k`` when the runs differ)."""
    ks = {run.protocol.table_k for run in runs}
    shown = str(ks.pop()) if len(ks) == 1 else "k"
    header = ["Method", *[c.replace("@k", f"@{shown}") for c, _ in MAIN_COLUMNS], "4o-J", "n", "backend"]
    rows = []
    for run in runs:
        overall = run.metrics["overall"]
        keys = [key.format(k=run.protocol.table_k) for _, key in MAIN_COLUMNS]
        rows.append(
            [run.label, *[overall["scores"].get(key) for key in keys], overall.get("judge"),
             overall.get("count"), "offline" if run.offline else run.metrics.get("backend", {}).get("llm")]
        )  # fmt: skip
    return markdown(header, rows)


def group_table(runs: Sequence[Run], metric: str = "f1") -> str:
    """One metric per category (LoCoMo, keyed by number) or question type (LongMemEval)."""
    groups = sorted({g for run in runs for g in run.metrics.get("groups", {})})
    header = ["Method", *groups]
    rows = [
        [run.label, *[run.metrics["groups"].get(g, {}).get("scores", {}).get(metric) for g in groups]]
        for run in runs
    ]
    return markdown(header, rows)


def split_table(runs: Sequence[Run], keys: Sequence[str] = ("f1", "R@{k}")) -> str:
    """All ten LoCoMo conversations, the five any threshold was fitted on, and the five held out."""
    ks = {run.protocol.table_k for run in runs}
    shown = ks.pop() if len(ks) == 1 else "k"
    header = ["Method"]
    for key in (k.format(k=shown) for k in keys):
        header += [f"{key} all", f"{key} fit (26-43)", f"{key} held-out (44-50)"]
    rows = []
    for run in runs:
        records = run.records()
        fit_ids = fit_split("locomo")
        fit = [r for r in records if r["dialogue_id"] in fit_ids]
        held = [r for r in records if r["dialogue_id"] not in fit_ids]
        parts = [
            score_records(part, run.protocol)["overall"]["scores"] if part else {}
            for part in (records, fit, held)
        ]
        row: list[Any] = [run.label]
        for key in keys:
            row += [p.get(key.format(k=run.protocol.table_k)) for p in parts]
        rows.append(row)
    return markdown(header, rows)
