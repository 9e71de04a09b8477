"""The retention view (``make retention``): scores against how much of the stream came after a question's evidence.

Each prediction record says how many turns and sessions were streamed after the question's last evidence turn
when it was asked (``since``, ``allmem.run.asking``): with ``protocol.ask=end`` that is the distance to the
stream's end, with ``after_evidence`` the rest of the evidence's session. Questions are binned by that distance
and each bin gets F1 and R@k (the table's k) with bootstrap intervals (``allmem.report.stats.bootstrap_ci``), per
ask point. LoCoMo is binned by turns and by sessions; LongMemEval by sessions only (its evidence names
sessions). Questions whose evidence matched no turn have no distance and are left out (``n`` counts the rest).
Columns: docs/PROTOCOL.md, "Retention view".
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from allmem.metrics.retrieval import recall_key
from allmem.report import stats
from allmem.report.compare import fmt_ci_row
from allmem.report.figures import pyplot
from allmem.report.items import KEYS, item_frame
from allmem.report.runs import Run
from allmem.report.tables import markdown
from allmem.types import record_key

# Lower edges of the distance bins: a bin holds [edge, next edge); the last one is open.
TURN_EDGES = (0, 1, 10, 50, 100, 200, 400)
SESSION_EDGES = (0, 1, 2, 4, 8, 16)
EDGES = {"turns": TURN_EDGES, "sessions": SESSION_EDGES}
COLUMNS = ["label", "dataset", "ask", "distance", "bin", "lower", "n", "metric", "mean", "low", "high"]


def bin_label(value: int, edges: Sequence[int]) -> str:
    """The bin of ``value``: ``"0"``, ``"1-9"``, ..., ``"400+"`` for the edges (0, 1, 10, ..., 400)."""
    i = bisect.bisect_right(edges, value) - 1
    if i < 0:
        raise ValueError(f"distance {value} below the first bin edge {edges[0]}")
    lo = edges[i]
    if i + 1 == len(edges):
        return f"{lo}+"
    hi = edges[i + 1] - 1
    return str(lo) if hi == lo else f"{lo}-{hi}"


def metrics_of(run: Run) -> dict[str, str]:
    """The two scores the view shows: ``{"F1": "f1", "R@5": "R@5"}`` (LongMemEval: ``recall_any@5``)."""
    names = run.protocol.metric_names()
    k = run.protocol.table_k
    out = {"F1": "f1"} if "f1" in names else {}
    for name in (recall_key(k), f"recall_any@{k}"):
        if name in names:
            out[recall_key(k)] = name
            break
    return out


def item_distances(run: Run) -> pd.DataFrame:
    """Per record with a distance: the keys, ``turns`` and ``sessions`` streamed after its evidence."""
    rows = []
    for rec in run.records():
        since = rec.get("since")
        if since is None:
            continue
        rows.append({"dialogue_id": rec.get("dialogue_id"), "question_id": rec["question_id"],
                     "ask": record_key(rec)[2], "turns": int(since["turns"]),
                     "sessions": int(since["sessions"])})  # fmt: skip
    return pd.DataFrame(rows, columns=[*KEYS, "turns", "sessions"])


def compute(runs: Sequence[Run], names: Sequence[str] | None = None) -> pd.DataFrame:
    """Long frame (``COLUMNS``): per run, ask point, distance unit and bin, each metric's mean and 95% interval
    (×100) over the included questions of the bin."""
    rows: list[dict[str, Any]] = []
    for run, label in zip(runs, names or [r.method for r in runs], strict=True):
        items = item_frame(run)
        frame = items[items["included"]].merge(item_distances(run), on=list(KEYS), how="inner")
        units = ("sessions",) if run.dataset.startswith("longmemeval") else ("turns", "sessions")
        for ask in sorted(set(frame["ask"]), key=lambda a: (a != "after_evidence", a)):
            part = frame[frame["ask"] == ask]
            for unit in units:
                edges = EDGES[unit]
                bins = part[unit].map(lambda v, e=edges: bin_label(int(v), e))
                for lower in edges:
                    label_bin = bin_label(lower, edges)
                    chosen = part[bins == label_bin]
                    if chosen.empty:
                        continue
                    for shown, col in metrics_of(run).items():
                        ci = stats.bootstrap_ci(chosen[col].to_numpy(dtype=float))
                        rows.append({
                            "label": label, "dataset": run.dataset, "ask": ask, "distance": unit,
                            "bin": label_bin, "lower": lower, "n": 0 if ci is None else ci.n, "metric": shown,
                            "mean": None if ci is None else 100 * ci.mean,
                            "low": None if ci is None else 100 * ci.low,
                            "high": None if ci is None else 100 * ci.high,
                        })  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def markdown_for(table: pd.DataFrame) -> str:
    """One row per method, ask point, distance unit and bin: n, then each metric with its interval."""
    metrics = list(dict.fromkeys(table["metric"]))
    header = ["Method", "Ask", "Since", "Bin", "n", *[f"{m} [95% CI]" for m in metrics]]
    rows = []
    keys = ["label", "ask", "distance", "lower"]
    for (label, ask, unit, _lower), part in table.groupby(keys, sort=False):
        by_metric = {r["metric"]: r for _, r in part.iterrows()}
        first = part.iloc[0]
        rows.append([label, ask, unit, first["bin"], int(part["n"].max()),
                     *[fmt_ci_row(by_metric[m]) if m in by_metric else "n/a" for m in metrics]])  # fmt: skip
    return markdown(header, rows)


def figure(table: pd.DataFrame, runs: Sequence[Run], out: Path, dataset: str) -> list[Path]:
    """Each metric against the sessions streamed since the evidence: a line per method and ask point, the
    bootstrap interval as error bars (PNG and PDF, with the runs' provenance)."""
    from allmem.report.figures.paper import save

    plt = pyplot()
    part = table[(table["dataset"] == dataset) & (table["distance"] == "sessions")]
    metrics = list(dict.fromkeys(part["metric"]))
    fig, axes = plt.subplots(1, max(len(metrics), 1), figsize=(5 * max(len(metrics), 1), 3.6), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=False):
        for (label, ask), line in part[part["metric"] == metric].groupby(["label", "ask"], sort=False):
            line = line.sort_values("lower")
            x = np.arange(len(SESSION_EDGES))
            pos = [SESSION_EDGES.index(v) for v in line["lower"]]
            mean = line["mean"].to_numpy(dtype=float)
            err = np.vstack(
                [mean - line["low"].to_numpy(dtype=float), line["high"].to_numpy(dtype=float) - mean]
            )
            ax.errorbar(x[pos], mean, yerr=err, marker="o", capsize=3, label=f"{label} ({ask})")
        ax.set_xticks(np.arange(len(SESSION_EDGES)), [bin_label(e, SESSION_EDGES) for e in SESSION_EDGES])
        ax.set_xlabel("sessions streamed after the last evidence turn")
        ax.set_ylabel(f"{metric} (x100)")
        ax.legend(fontsize=7)
    return save(fig, runs, out, "Bars: 95% bootstrap intervals. Bins: docs/PROTOCOL.md, 'Retention view'.")


DEFINITIONS = (
    "Since: turns (or sessions) streamed after the question's last evidence turn when it was asked (ask end: up to"
    " the stream's end; ask after_evidence: the rest of the evidence's session). Bin: [lower, next lower) of the"
    f" edges {list(TURN_EDGES)} (turns) and {list(SESSION_EDGES)} (sessions). n: questions in the bin that the"
    " protocol scores; questions whose evidence matched no turn are left out. Means x100 with 95% percentile"
    " bootstrap intervals. Definitions: docs/PROTOCOL.md, 'Retention view'.",
)
