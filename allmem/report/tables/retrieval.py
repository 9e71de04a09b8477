"""The retrieval table (``make retrieval``): every method's retrieval at turn and session level, any-gold and
all-gold, recall and NDCG, and unit precision, from the runs of Table 1, as each run's ``metrics.json`` states them
(its ``granularity`` block, ``allmem/metrics/granularity.py``; each column defined in docs/PROTOCOL.md, "Retrieval
at every granularity").

Table 1 keeps the paper's R@5 and N@5; this table states the granularity of each number. Questions without gold
ids, and LongMemEval's abstention questions, are left out (the ``n`` column counts what is in). Unit precision needs
the ranked units each prediction records (records version 2); older runs show it as n/a.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from allmem.metrics import granularity
from allmem.metrics.granularity import LEVELS, MEASURES
from allmem.metrics.protocols import validate_record
from allmem.report.runs import Run
from allmem.report.tables import markdown

TITLES = {"any": "any", "all": "all", "recall": "R", "ndcg": "N"}


def levels(run: Run) -> dict[str, Any]:
    """The run's ``granularity`` block. A run sealed before ``metrics.json`` carried it has its block computed
    here from its end-of-stream records by the same function (``granularity.summary``), so both read alike."""
    block = run.metrics.get(granularity.KEY)
    if block is None:
        records = [validate_record(r, f"{run.path}: record {i}") for i, r in enumerate(run.end_records())]
        block = granularity.summary(records, run.protocol)
    return block


def compute(runs: Sequence[Run], names: Sequence[str] | None = None) -> pd.DataFrame:
    """Long frame: label, dataset, metric, mean ×100, n (questions with a value)."""
    rows: list[dict[str, Any]] = []
    for run, label in zip(runs, names or [r.method for r in runs], strict=True):
        block = levels(run)
        for metric in granularity.names(block["ks"]):  # in the table's order (metrics.json sorts its keys)
            rows.append({"label": label, "dataset": run.dataset, "metric": metric, "mean": block["scores"][metric],
                         "n": block["n"][metric]})  # fmt: skip
    return pd.DataFrame(rows, columns=["label", "dataset", "metric", "mean", "n"])


def markdown_for(table: pd.DataFrame, k: int) -> str:
    """One row per method at cut-off ``k``: turn any / all / R / N, session any / all / R / N, unit P."""
    metrics = [f"{lv}_{m}@{k}" for lv in LEVELS for m in MEASURES] + [f"P@{k}"]
    header = ["Method", *[f"{lv} {TITLES[m]}@{k}" for lv in LEVELS for m in MEASURES], f"unit P@{k}", "n"]
    rows = []
    for label in dict.fromkeys(table["label"]):
        part = table[table["label"] == label].set_index("metric")
        cells = ["n/a" if m not in part.index or pd.isna(part.loc[m, "mean"]) else f"{part.loc[m, 'mean']:.2f}"
                 for m in metrics]  # fmt: skip
        n = int(part.loc[f"session_any@{k}", "n"]) if f"session_any@{k}" in part.index else 0
        rows.append([label, *cells, n])
    return markdown(header, rows)


DEFINITIONS = (
    "turn / session: gold and ranked ids at that granularity (a turn's session: D3:5 -> D3); any: some gold id in the"
    " top k; all: every gold id in the top k; R: share of the gold ids in the top k (Table 1's R@k at turn level);"
    " N: binary NDCG (Table 1's N@k at turn level); unit P: share of the top k returned units that hold any gold id"
    " (a merged unit counts once). LongMemEval's gold turns are its has_answer turns (runs made before records"
    " version 6 ranked sessions: turn columns n/a, unit P at session level). Questions without gold ids and"
    " LongMemEval abstention questions are left out (n). Definitions:"
    " docs/PROTOCOL.md, 'Retrieval at every granularity'.",
)
