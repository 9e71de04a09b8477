"""Means with bootstrap intervals, and paired differences to a reference, for any set of labelled runs.

Table 1 (methods), Table 4 (ablations) and the sweep figures all ask the same question of per-question scores:
what is each run's mean with its interval, and how does it differ from the reference on the same questions.
The answer is one long frame (label, subset, group, metric, mean, ci_low, ci_high, n, delta, p), from which
each table picks its layout; its CSV is what ``results/tables/*.csv`` hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from allmem.metrics.protocols import table_names
from allmem.report import stats
from allmem.report.items import JUDGE, KEYS

METRIC_NAMES = {"judge": "4o-J", "f1": "F1", "bleu1": "BLEU-1", "rougeL": "ROUGE-L"}
# Recall and nDCG at the paper's table k, named once from the protocol (``R@5``, ``N@5``): every report line uses these.
R_K, N_K = table_names()
OVERALL = "overall"


PAPER_JUDGE = (
    "gpt-4o"  # the judge the paper's "4o-J" names; any other judge's column is headed with its own name
)


def metric_title(name: str, judge_model: str | None = None) -> str:
    """A metric's column title; the judge's is "4o-J" only when the paper's judge judged (``judge_model``)."""
    if name == "judge" and judge_model and judge_model != PAPER_JUDGE:
        return f"J ({judge_model})"
    return METRIC_NAMES.get(name, name)


def _column(name: str) -> str:
    return JUDGE if name == "judge" else name


def compare(
    frames: Mapping[str, pd.DataFrame],
    metrics: Sequence[str],
    reference: str | None,
    subset: str = "all",
    by_group: bool = True,
    tests: bool = True,
) -> pd.DataFrame:
    """Rows for every label × group (``overall`` and each category / question type) × metric."""
    rows = []
    ref = frames.get(reference) if reference else None
    for label, frame in frames.items():
        frame = frame[frame["included"]]
        groups = [(OVERALL, frame)]
        if by_group:
            groups += [(str(g), part) for g, part in frame.groupby("group", sort=False)]
        cols = [c for c in dict.fromkeys(_column(m) for m in metrics) if c in frame]
        pairs = _Pairs(frame, ref, cols) if tests and ref is not None and label != reference else None
        for group, part in groups:
            for metric in metrics:
                col = _column(metric)
                if col not in part:
                    continue
                values = part[col].to_numpy(dtype=float)
                ci = stats.bootstrap_ci(values)
                row = {"label": label, "subset": subset, "group": group, "metric": metric,
                       "mean": None, "ci_low": None, "ci_high": None, "n": 0, "reference": reference,
                       "delta": None, "p": None}  # fmt: skip
                if ci is not None:
                    row.update(mean=100 * ci.mean, ci_low=100 * ci.low, ci_high=100 * ci.high, n=ci.n)
                if pairs is not None and ci is not None:
                    row.update(pairs.paired(group, col))
                rows.append(row)
    return pd.DataFrame(rows)


class _Pairs:
    """One run's questions joined with the reference's on the question keys, once for every group and metric."""

    def __init__(self, frame: pd.DataFrame, ref: pd.DataFrame, cols: Sequence[str]) -> None:
        ref = ref[ref["included"]]
        grouped = "group" in frame and "group" in ref
        keep = [*KEYS, *(["group"] if grouped else []), *cols]
        # an inner join keeps this run's row order, so each group's pairs come in the order the group's own
        # join would give them (the permutation test's random signs are drawn by position)
        self.joined = frame[keep].merge(ref[keep], on=list(KEYS), suffixes=("", "_ref"))
        self.grouped = grouped
        self._groups: dict[str, pd.DataFrame] = {OVERALL: self.joined}

    def _group(self, group: str) -> pd.DataFrame:
        if group not in self._groups:
            if not self.grouped:
                raise KeyError("group")
            j = self.joined
            self._groups[group] = j[(j["group"].astype(str) == group) & (j["group_ref"].astype(str) == group)]
        return self._groups[group]

    def paired(self, group: str, col: str) -> dict[str, float | None]:
        """Difference (this − reference, ×100) and the paired permutation p on the questions both answered."""
        joined = self._group(group)
        a = joined[col].to_numpy(dtype=float)
        b = joined[f"{col}_ref"].to_numpy(dtype=float)
        keep = ~(np.isnan(a) | np.isnan(b))
        if not keep.any():
            return {"delta": None, "p": None}
        return {"delta": 100 * float(np.mean(a[keep] - b[keep])), "p": stats.paired_permutation_p(a, b)}


def fmt_ci(mean: float | None, low: float | None, high: float | None) -> str:
    if mean is None or (isinstance(mean, float) and np.isnan(mean)):
        return "n/a"
    return f"{mean:.2f} [{low:.2f}, {high:.2f}]"


def fmt_ci_row(row: Mapping[str, Any]) -> str:
    """``fmt_ci`` of a long-format table row with ``mean``, ``low`` and ``high`` columns."""
    return fmt_ci(row["mean"], row["low"], row["high"])


def fmt_p(p: float | None) -> str:
    if p is None or (isinstance(p, float) and np.isnan(p)):
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def fmt_delta(delta: float | None, p: float | None) -> str:
    if delta is None or (isinstance(delta, float) and np.isnan(delta)):
        return "n/a"
    return f"{delta:+.2f} (p {fmt_p(p)})"


class Cells:
    """The formatted cells of one ``compare`` frame, looked up by label, metric and group (the first such row)."""

    def __init__(self, table: pd.DataFrame) -> None:
        self._rows: dict[tuple[str, str, str], Any] = {}
        for row in table.to_dict("records"):
            self._rows.setdefault((row["label"], row["metric"], row["group"]), row)

    def __call__(self, label: str, metric: str, group: str = OVERALL, what: str = "ci") -> str:
        row = self._rows.get((label, metric, group))
        if row is None:
            return "n/a"
        if what == "delta":
            return fmt_delta(row["delta"], row["p"])
        if what == "mean":
            return "n/a" if pd.isna(row["mean"]) else f"{row['mean']:.2f}"
        return fmt_ci(None if pd.isna(row["mean"]) else row["mean"], row["ci_low"], row["ci_high"])


def by_dialogue(
    frames: dict[str, pd.DataFrame], dialogues: Sequence[str], keep: bool
) -> dict[str, pd.DataFrame]:
    """Each frame's questions from ``dialogues`` (keep True) or from the others (keep False)."""
    ids = set(dialogues)
    return {k: f[f["dialogue_id"].isin(ids) == keep] for k, f in frames.items()}
