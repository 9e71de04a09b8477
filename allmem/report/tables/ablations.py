"""Table 4: ablations of All-Mem (paper Sec. 4.6 and App. E), each against full All-Mem on the same questions.

Besides answer and retrieval quality (with intervals and paired tests) each row shows what the ablation changes
mechanically: the visible surface left after consolidation (share of the append-only count) and the search time
of Stages 1-3 per query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from allmem.report.compare import N_K, R_K, Cells, by_dialogue, compare, metric_title
from allmem.report.items import end_frame
from allmem.report.runs import Run
from allmem.report.tables import markdown
from allmem.report.tables.table1 import REFERENCE, table_metrics

LABELS = {
    "allmem": "All-Mem (full)",
    "allmem_fullbank": "w/o visible-surface gating (Stage 1 over the full bank)",
    "allmem_noatc": "w/o ATC (append-only bank)",
    "allmem_nosplit": "w/o Split",
    "allmem_nomerge": "w/o Merge",
    "allmem_noupdate": "w/o Update",
    "allmem_noexpand": "w/o typed-link expansion (Stage 2 off)",
    "allmem_noprio": "w/o link-type priority",
}
STAGES = ("stage1", "stage2", "stage3")


def surface_share(run: Run) -> float | None:
    """Visible units at the end of each stream over turns written, pooled over dialogues (%)."""
    stats = run.stats().values()
    turns = sum(int(s.get("turns", 0)) for s in stats)
    visible = [s.get("n_visible") for s in stats]
    if not turns or any(v is None for v in visible):
        return None
    return 100.0 * sum(int(v) for v in visible) / turns


def search_ms(run: Run) -> float | None:
    """Mean Stage 1 + 2 + 3 time per query (query embedding left out: it is cached for repeated questions)."""
    totals = []
    for r in run.end_records():
        lat = r.get("latency_ms") or {}
        if all(s in lat for s in STAGES):
            totals.append(sum(float(lat[s]) for s in STAGES))
    return sum(totals) / len(totals) if totals else None


def compute(runs: Sequence[Run]) -> tuple[pd.DataFrame, pd.DataFrame]:
    frames = {run.method: end_frame(run) for run in runs}
    reference = REFERENCE if REFERENCE in frames else None
    table = compare(frames, table_metrics(runs), reference, by_group=False)
    extra = pd.DataFrame(
        [{"label": r.method, "visible_pct": surface_share(r), "search_ms": search_ms(r)} for r in runs]
    )
    return table, extra


def markdown_for(table: pd.DataFrame, extra: pd.DataFrame, runs: Sequence[Run]) -> str:
    metrics = [m for m in table_metrics(runs) if m in set(table["metric"])]
    labels = list(dict.fromkeys(table["label"]))
    header = ["Variant", *[metric_title(m) for m in metrics], "Visible % of N", "Stages 1-3 ms/query"]
    cell = Cells(table)
    rows = []
    for label in labels:
        e = extra[extra["label"] == label].iloc[0]
        vis: Any = "–" if pd.isna(e["visible_pct"]) else f"{e['visible_pct']:.1f}"
        ms: Any = "–" if pd.isna(e["search_ms"]) else f"{e['search_ms']:.2f}"
        rows.append([f"{LABELS.get(label, label)} (`{label}`)", *[cell(label, m) for m in metrics], vis, ms])
    out = [markdown(header, rows)]
    if table["reference"].notna().any():
        out.append(
            "Difference to full All-Mem on the same questions (variant − allmem, points) and paired p:"
        )
        rows = [[LABELS.get(label, label), *[cell(label, m, what="delta") for m in metrics]]
                for label in labels if label != REFERENCE]  # fmt: skip
        out.append(markdown(["Variant", *[metric_title(m) for m in metrics]], rows))
    return "\n\n".join(out)


# ------------------------------------------------------------------ the retrieval ablations of allmem_hybrid
HYBRID_REFERENCE = "allmem_hybrid"
HYBRID_METRICS = (R_K, N_K, "f1")
HYBRID_LABELS = {
    "allmem_hybrid": "allmem_hybrid (every signal)",
    "allmem_hybrid_nolex": "w/o lexical channel (dense only)",
    "allmem_hybrid_nodense": "w/o dense channel (lexical only)",
    "allmem_hybrid_noexpand": "w/o typed-link expansion",
    "allmem_hybrid_nonbr": "w/o Stage 3 neighbour term",
    "allmem_hybrid_nofill": "w/o budget filling (top K = 16)",
    "allmem_hybrid_nodate": "w/o date-period boost",
    "allmem_hybrid_nodf": "w/o frequent-word query filter",
}


def compute_hybrid(runs: Sequence[Run], fit: Sequence[str]) -> pd.DataFrame:
    """R@5, N@5 and F1 with intervals and paired tests against allmem_hybrid, on the held-out and fit
    conversations (``fit`` names the fit conversations) and on all of them."""
    frames = {run.method: end_frame(run) for run in runs}
    reference = HYBRID_REFERENCE if HYBRID_REFERENCE in frames else None
    parts = [compare(frames, HYBRID_METRICS, reference, subset="all", by_group=False)]
    if fit:
        for subset, keep in (("held-out", False), ("fit", True)):
            parts.append(
                compare(
                    by_dialogue(frames, fit, keep), HYBRID_METRICS, reference, subset=subset, by_group=False
                )
            )
    return pd.concat(parts, ignore_index=True)


def hybrid_markdown(table: pd.DataFrame) -> str:
    labels = list(dict.fromkeys(table["label"]))
    out = []
    for subset in ("held-out", "fit", "all"):
        part = table[table["subset"] == subset]
        if part.empty or not int(part["n"].max() or 0):
            continue
        header = ["Variant", *[metric_title(m) for m in HYBRID_METRICS],
                  *[f"Δ{metric_title(m)}" for m in HYBRID_METRICS]]  # fmt: skip
        cell = Cells(part)
        rows = [[f"{HYBRID_LABELS.get(lab, lab)} (`{lab}`)", *[cell(lab, m) for m in HYBRID_METRICS],
                 *[cell(lab, m, what="delta") if lab != HYBRID_REFERENCE else "–" for m in HYBRID_METRICS]]
                for lab in labels]  # fmt: skip
        out += [
            f"### {subset.capitalize()} conversations ({int(part['n'].max())} questions)",
            markdown(header, rows),
        ]
    out.append(f"Δ: variant − `{HYBRID_REFERENCE}` on the same questions (points), paired p in parentheses.")
    return "\n\n".join(out)
