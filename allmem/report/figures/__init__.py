"""Figures from run directories (matplotlib, no display needed): what the tables hold, drawn.

- ``<dataset>_f1_by_group.png``: F1 per category (LoCoMo) or question type (LongMemEval), one bar per method;
- ``<dataset>_surface.png``: visible surface against the append-only count per dialogue (paper Fig. 5a);
- ``<dataset>_recoverability.png``: R(H), the share of archived units within H hops (paper Fig. 6).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from allmem import files
from allmem.report.provenance import write_figure_runs
from allmem.report.tables import Run
from allmem.report.tables.atc import pooled_recoverability


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed); imported late, only by what draws."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, out: Path, runs: Sequence[Run]) -> Path:
    """The PNG, and the runs it was drawn from beside it (``provenance.write_figure_runs``)."""
    fig.tight_layout()
    files.write_via(out, lambda tmp: fig.savefig(tmp, dpi=120))
    plt.close(fig)
    write_figure_runs(out, runs)
    return out


def f1_by_group(runs: Sequence[Run], out: Path) -> Path:
    plt = pyplot()
    groups = sorted({g for r in runs for g in r.metrics.get("groups", {})})
    width = 0.8 / max(len(runs), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(groups)), 3.5))
    for i, run in enumerate(runs):
        values = [run.metrics["groups"].get(g, {}).get("scores", {}).get("f1") or 0.0 for g in groups]
        ax.bar([x + i * width for x in range(len(groups))], values, width, label=run.method)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(groups))], groups)
    ax.set_ylabel("F1")
    ax.legend(fontsize=7, ncols=2)
    return _save(plt, fig, out, runs)


def surface(runs: Sequence[Run], out: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    top = 0
    for run in runs:
        stats = sorted(run.stats().values(), key=lambda s: s.get("turns", 0))
        xs = [s.get("turns", 0) for s in stats]
        ax.plot(xs, [s.get("n_visible", 0) for s in stats], "o", label=f"{run.method}: visible")
        top = max([top, *xs])
    ax.plot([0, top], [0, top], "k--", lw=1, label="append-only |V+| = N")
    ax.set_xlabel("turns written (N)")
    ax.set_ylabel("visible units")
    ax.legend(fontsize=7)
    return _save(plt, fig, out, runs)


def recoverability(runs: Sequence[Run], out: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for run in runs:
        rec = pooled_recoverability(run)
        if rec.get("n_archived"):
            hs = sorted(rec["curve"])
            ax.step(hs, [100 * rec["curve"][h] for h in hs], where="post", label=run.method)
    ax.set_xlabel("hop budget H")
    ax.set_ylabel("archived units reachable (%)")
    ax.set_ylim(0, 102)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return _save(plt, fig, out, runs)


def write_figures(runs: Sequence[Run], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for dataset in sorted({r.dataset for r in runs}):
        subset = [r for r in runs if r.dataset == dataset]
        written.append(f1_by_group(subset, folder / f"{dataset}_f1_by_group.png"))
        with_atc = [r for r in subset if r.consolidates]
        if with_atc:
            written.append(surface(with_atc, folder / f"{dataset}_surface.png"))
            written.append(recoverability(with_atc, folder / f"{dataset}_recoverability.png"))
    return written
