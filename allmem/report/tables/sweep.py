"""``allmem report sweep``: the summary of any Hydra multirun, whatever it swept.

The config keys whose values differ between the complete runs under the root become the table's first columns
(method name included); each run gets its means with 95% intervals, mean context tokens and generator input. The
figure plots F1 and R@5 against the one numeric key that varies, or against generator input tokens when several
keys vary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from allmem import files
from allmem.report.compare import R_K, compare, fmt_ci, metric_title
from allmem.report.figures import pyplot
from allmem.report.figures.paper import generator_tokens, save
from allmem.report.frame import config_columns
from allmem.report.items import end_frame
from allmem.report.provenance import footer
from allmem.report.runs import Run, check_same_code, find_runs
from allmem.report.tables import markdown
from allmem.report.tables.table1 import table_metrics


def varying_keys(runs: list[Run]) -> list[str]:
    cols = [config_columns(r) for r in runs]
    keys = sorted({k for c in cols for k in c})
    out = [k for k in keys if len({repr(c.get(k)) for c in cols}) > 1]
    return sorted(out, key=lambda k: (k != "cfg.method.name", k))


def summary_frame(runs: list[Run]) -> pd.DataFrame:
    keys = varying_keys(runs)
    frames = {str(i): end_frame(r) for i, r in enumerate(runs)}
    metrics = table_metrics(runs)
    table = compare(frames, metrics, None, by_group=False, tests=False)
    rows = []
    for i, run in enumerate(runs):
        cfg = config_columns(run)
        row: dict[str, Any] = {k.removeprefix("cfg."): cfg.get(k) for k in keys}
        row.update(dataset=run.dataset, run_dir=str(run.path), context_tokens=frames[str(i)]["context_tokens"].mean(),
                   generator_tokens=generator_tokens(run))  # fmt: skip
        for m in metrics:
            hit = table[(table["label"] == str(i)) & (table["metric"] == m)]
            if not hit.empty:
                h = hit.iloc[0]
                row.update(
                    {m: h["mean"], f"{m}_ci_low": h["ci_low"], f"{m}_ci_high": h["ci_high"], "n": h["n"]}
                )
        rows.append(row)
    return pd.DataFrame(rows)


def summarise_sweep(root: Path, out: Path) -> list[Path]:
    runs = find_runs(root)
    if not runs:
        raise SystemExit(f"allmem report sweep: no complete run directory (with DONE) under {root}")
    check_same_code(runs)
    table = summary_frame(runs)
    keys = [k.removeprefix("cfg.") for k in varying_keys(runs)]
    metrics = [m for m in table_metrics(runs) if m in table]
    rows = [[*[row.get(k) for k in keys], *[fmt_ci(row[m], row[f"{m}_ci_low"], row[f"{m}_ci_high"]) for m in metrics],
             f"{row['context_tokens']:.0f}", row.get("n")] for _, row in table.iterrows()]  # fmt: skip
    text = "\n\n".join([
        f"# Sweep: {root}", markdown([*keys, *[metric_title(m) for m in metrics], "Context tokens", "n"], rows),
        footer(runs, "sweep", [f"Keys that vary between these runs: {', '.join(keys) or 'none'}."]),
    ])  # fmt: skip
    (out / "tables").mkdir(parents=True, exist_ok=True)
    md, csv = out / "tables" / "sweep.md", out / "tables" / "sweep.csv"
    files.write_atomic(md, text + "\n")
    files.write_atomic(csv, table.to_csv(index=False))
    numeric = [k for k in keys if pd.api.types.is_numeric_dtype(table[k])]
    xkey = numeric[0] if len(keys) == 1 and numeric else "generator_tokens"
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, m in zip(axes, ("f1", R_K), strict=True):
        if m not in table:
            continue
        t = table.sort_values(xkey)
        yerr = [t[m] - t[f"{m}_ci_low"], t[f"{m}_ci_high"] - t[m]]
        ax.errorbar(t[xkey], t[m], yerr=yerr, fmt="-o" if xkey != "generator_tokens" else "o", capsize=3)
        if xkey == "generator_tokens" and keys:
            for _, r in t.iterrows():
                ax.annotate(", ".join(f"{k.split('.')[-1]}={r[k]}" for k in keys), (r[xkey], r[m]), fontsize=6,
                            textcoords="offset points", xytext=(3, 3))  # fmt: skip
        ax.set_xlabel(xkey if xkey != "generator_tokens" else "generator input tokens per query")
        ax.set_ylabel(f"{metric_title(m)} (%, 95% CI)")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Sweep over {', '.join(keys) or '(nothing varies)'}", fontsize=10)
    return [md, csv, *save(fig, runs, out / "figures" / "sweep")]
