"""The equal-context view (``make equal_context``): each method's F1 and R@k with its packed context filled to the
same sizes, so a better memory and a larger context can be told apart.

Under the matched budget (Table 1) the budget is a cap: a method whose ranking is short packs fewer tokens, and
with the extractive reader F1 follows packed context. The runs of ``configs/experiment/equal_context.yaml`` set
``budget.fill`` (``allmem.budget.fill``): each retrieval is deepened until the packed context is full, within one
unit of the size, or the memory has nothing more. Per method and size the table gives the mean packed tokens,
the share of questions whose context is full (a unit had to be dropped), and F1 and R@k (the table's k) with
95% bootstrap intervals (``allmem.report.stats.bootstrap_ci``) over the questions the protocol scores. Columns:
docs/PROTOCOL.md, "Equal context".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from allmem.report import stats
from allmem.report.compare import fmt_ci_row
from allmem.report.figures import pyplot
from allmem.report.items import KEYS, item_frame
from allmem.report.runs import Run
from allmem.report.tables import markdown
from allmem.report.tables.retention import metrics_of
from allmem.types import record_key

COLUMNS = ["label", "dataset", "size", "n", "tokens", "full", "metric", "mean", "low", "high"]


def packing(run: Run) -> pd.DataFrame:
    """Per record: the keys, ``context_tokens`` and ``full`` (a unit was dropped: ``dropped_tokens`` > 0)."""
    rows = [{"dialogue_id": r.get("dialogue_id"), "question_id": r["question_id"], "ask": record_key(r)[2],
             "packed": int(r.get("context_tokens") or 0), "full": bool(r.get("dropped_tokens"))}
            for r in run.records()]  # fmt: skip
    return pd.DataFrame(rows, columns=[*KEYS, "packed", "full"])


def compute(runs: Sequence[Run], names: Sequence[str] | None = None) -> pd.DataFrame:
    """Long frame (``COLUMNS``): per run (a method at a size), each metric's mean and 95% interval (x100) over
    the included questions, with their mean packed tokens and the share (%) whose context is full."""
    rows: list[dict[str, Any]] = []
    for run, label in zip(runs, names or [r.method for r in runs], strict=True):
        items = item_frame(run)
        frame = items[items["included"]].merge(packing(run), on=list(KEYS), how="inner")
        size = int(run.value("budget.tokens"))
        tokens = float(frame["packed"].mean()) if len(frame) else math.nan
        full = 100 * float(frame["full"].mean()) if len(frame) else math.nan
        for shown, col in metrics_of(run).items():
            ci = stats.bootstrap_ci(frame[col].to_numpy(dtype=float))
            rows.append({
                "label": label, "dataset": run.dataset, "size": size, "n": 0 if ci is None else ci.n,
                "tokens": tokens, "full": full, "metric": shown,
                "mean": None if ci is None else 100 * ci.mean,
                "low": None if ci is None else 100 * ci.low,
                "high": None if ci is None else 100 * ci.high,
            })  # fmt: skip
    table = pd.DataFrame(rows, columns=COLUMNS)
    return table.sort_values(["label", "size"], kind="stable", key=_label_order(table)).reset_index(drop=True)


def _label_order(table: pd.DataFrame):
    """Methods in the order they first appear (the experiment's order), sizes ascending."""
    first = {label: i for i, label in enumerate(dict.fromkeys(table["label"]))}
    return lambda col: col.map(first) if col.name == "label" else col


def markdown_for(table: pd.DataFrame) -> str:
    """One row per method and size: n, mean packed tokens, % full, then each metric with its interval."""
    metrics = list(dict.fromkeys(table["metric"]))
    header = ["Method", "Size", "n", "Packed tokens", "Full (%)", *[f"{m} [95% CI]" for m in metrics]]
    rows = []
    for (label, size), part in table.groupby(["label", "size"], sort=False):
        by_metric = {r["metric"]: r for _, r in part.iterrows()}
        first = part.iloc[0]
        rows.append([label, int(size), int(part["n"].max()), f"{first['tokens']:.0f}", f"{first['full']:.1f}",
                     *[fmt_ci_row(by_metric[m]) if m in by_metric else "n/a" for m in metrics]])  # fmt: skip
    return markdown(header, rows)


def figure(table: pd.DataFrame, runs: Sequence[Run], out: Path, dataset: str) -> list[Path]:
    """Each metric against the mean packed tokens: a line per method through its sizes, the bootstrap interval
    as error bars (PNG and PDF, with the runs' provenance)."""
    from allmem.report.figures.paper import save

    plt = pyplot()
    part = table[table["dataset"] == dataset]
    metrics = list(dict.fromkeys(part["metric"]))
    fig, axes = plt.subplots(1, max(len(metrics), 1), figsize=(5 * max(len(metrics), 1), 3.8), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=False):
        for label, line in part[part["metric"] == metric].groupby("label", sort=False):
            line = line.sort_values("size")
            mean = line["mean"].to_numpy(dtype=float)
            err = [mean - line["low"].to_numpy(dtype=float), line["high"].to_numpy(dtype=float) - mean]
            ax.errorbar(
                line["tokens"].to_numpy(dtype=float), mean, yerr=err, marker="o", capsize=3, label=label
            )
        sizes = sorted(set(part["size"]))
        for size in sizes:
            ax.axvline(size, color="0.85", lw=0.8, zorder=0)
        ax.set_xlim(0, 1.05 * max(sizes, default=1))
        ax.set_xlabel("mean packed context tokens (o200k_base)")
        ax.set_ylabel(f"{metric} (x100)")
        ax.legend(fontsize=6, ncol=2)
    return save(
        fig, runs, out, "Grey lines: the sizes (budget.tokens, budget.fill). Bars: 95% bootstrap intervals."
    )


DEFINITIONS = (
    "Size: budget.tokens with budget.fill: each retrieval deepened (each method's rule: docs/BASELINES.md, 'Equal"
    " context') until its packed context is full or the memory has nothing more. Packed tokens: mean tokens of"
    " the packed context (o200k_base). Full: % of questions whose context is full (a further unit did not fit, so"
    " it holds the size to within one unit). n: questions the protocol scores. Means x100 with 95% percentile"
    " bootstrap intervals. Definitions: docs/PROTOCOL.md, 'Equal context'.",
)
