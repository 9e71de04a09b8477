"""Figures 3-6 of the paper, drawn from run directories (matplotlib, Agg; PNG and PDF).

- fig3: F1 and R@5 against realised generator input tokens per query over All-Mem's (K, k, L) sweep, the
  compared methods as points;
- fig4: sensitivity to theta and d_sigma: F1, R@5, visible surface (% of turns) and search time per query;
- fig5: (a) visible surface size against history length N at every consolidation checkpoint, with the
  append-only line; (b) Mem-Lat by stage; (c) Stage 1 time on the full bank and on the visible surface against N
  (the probe lines of ``atc_events.jsonl``);
- fig6: recoverability R(H), the share of archived units reachable from the visible surface within H hops.
Every figure carries a caption line saying what made it (backend, dataset, questions, date, git sha).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from allmem import files
from allmem.report.compare import R_K, compare, metric_title
from allmem.report.figures import pyplot
from allmem.report.items import end_frame
from allmem.report.provenance import DATASET_TITLES, caption, write_figure_runs
from allmem.report.runs import Run
from allmem.report.tables.ablations import STAGES, search_ms, surface_share
from allmem.report.tables.atc import pooled_recoverability

STAGE_LABELS = {"embed": "query embedding", "stage1": "Stage 1 anchors", "stage2": "Stage 2 expansion",
                "stage3": "Stage 3 re-rank"}  # fmt: skip


def save(fig, runs: Sequence[Run], out: Path, note: str = "") -> list[Path]:
    """Caption (provenance, optional note) at the bottom, then PNG and PDF side by side, and the runs it was
    drawn from beside them (``provenance.write_figure_runs``)."""
    plt = pyplot()
    text = caption(runs) + (f"\n{note}" if note else "")
    fig.text(0.005, 0.005, text, fontsize=6.5, color="0.3", ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.06 if note else 0.04, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        path = out.with_suffix(f".{ext}")
        files.write_via(path, lambda tmp: fig.savefig(tmp, dpi=150))
        paths.append(path)
    plt.close(fig)
    write_figure_runs(out, runs)
    return paths


def generator_tokens(run: Run) -> float:
    """Realised generator input per query: the generate phase's input tokens (prompt + packed context)."""
    gen = (run.metrics.get("cost") or {}).get("generate") or {}
    n = int(run.metrics.get("n_records") or 0)
    if gen.get("tokens_in") and n:
        return float(gen["tokens_in"]) / n
    frame = end_frame(run)
    return float(frame["context_tokens"].astype(float).mean())


def _intervals(runs: Sequence[Run], metrics: Sequence[str]) -> pd.DataFrame:
    frames = {str(i): end_frame(r) for i, r in enumerate(runs)}
    table = compare(frames, metrics, None, by_group=False, tests=False)
    table["run"] = table["label"].astype(int)
    return table


def _yerr(rows: pd.DataFrame) -> np.ndarray:
    return np.vstack([rows["mean"] - rows["ci_low"], rows["ci_high"] - rows["mean"]]).astype(float)


# --------------------------------------------------------------------------------------------------- fig 3
def _points(runs: Sequence[Run], ci: pd.DataFrame, x: Sequence[float], kinds: Sequence[str]) -> pd.DataFrame:
    """The data behind a figure: one row per run with its config keys of interest and metric intervals."""
    rows = []
    for i, (run, kind) in enumerate(zip(runs, kinds, strict=True)):
        row = {"kind": kind, "method": run.method, "dataset": run.dataset, "run_dir": str(run.path), "x": x[i],
               "K": run.value("method.retrieval.K"), "k": run.value("method.retrieval.k"),
               "L": run.value("method.retrieval.L"), "theta": run.value("atc.theta"),
               "d_sigma": run.value("method.links.d_sigma")}  # fmt: skip
        for _, r in ci[ci["run"] == i].iterrows():
            row |= {
                r["metric"]: r["mean"],
                f"{r['metric']}_ci_low": r["ci_low"],
                f"{r['metric']}_ci_high": r["ci_high"],
            }
        rows.append(row)
    return pd.DataFrame(rows)


def fig3(
    sweep: Sequence[Run], anchors: Sequence[Run], methods: Sequence[Run], out: Path, dataset: str
) -> tuple[list[Path], pd.DataFrame]:
    plt = pyplot()
    allr = [*sweep, *anchors, *methods]
    ci = _intervals(allr, ["f1", R_K])
    x = [generator_tokens(r) for r in allr]
    kinds = ["K x L sweep"] * len(sweep) + ["k sweep"] * len(anchors) + ["method"] * len(methods)
    data = _points(allr, ci, x, kinds).rename(columns={"x": "generator_tokens"})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    n_sweep, n_anchor = len(sweep), len(anchors)
    for ax, metric, title in zip(axes, ("f1", R_K), (metric_title("f1"), R_K), strict=True):
        rows = ci[ci["metric"] == metric].set_index("run")
        labels = []  # (x, y, text, colour): placed apart at the end, with a leader line where moved
        by_l: dict[int, list[int]] = {}
        for i, r in enumerate(sweep):
            by_l.setdefault(int(r.value("method.retrieval.L")), []).append(i)
        cmap = plt.get_cmap("viridis")
        for j, (L, idx) in enumerate(sorted(by_l.items())):
            idx = sorted(idx, key=lambda i: x[i])
            color = cmap(j / max(1, len(by_l) - 1) * 0.85)
            ax.errorbar([x[i] for i in idx], rows.loc[idx, "mean"], yerr=_yerr(rows.loc[idx]), fmt="-o", ms=4,
                        color=color, capsize=2, lw=1.2, label=f"All-Mem, L={L} (K varies)")  # fmt: skip
            labels += [
                (x[i], rows.loc[i, "mean"], f"K={sweep[i].value('method.retrieval.K')}", color) for i in idx
            ]
        for i, r in enumerate(anchors):
            k = n_sweep + i
            ax.errorbar([x[k]], [rows.loc[k, "mean"]], yerr=_yerr(rows.loc[[k]]), fmt="^", color="tab:red", ms=5,
                        capsize=2, label="All-Mem, k varies (K=16, L=40)" if i == 0 else None)  # fmt: skip
            labels.append((x[k], rows.loc[k, "mean"], f"k={r.value('method.retrieval.k')}", "tab:red"))
        for i, r in enumerate(methods):
            k = n_sweep + n_anchor + i
            star = r.method == "allmem"
            ax.errorbar([x[k]], [rows.loc[k, "mean"]], yerr=_yerr(rows.loc[[k]]), fmt="*" if star else "s",
                        ms=9 if star else 5, color="black" if star else "0.45", capsize=2,
                        label=("All-Mem default (K=16, k=10, L=40)" if star else None))  # fmt: skip
            if not star:
                labels.append((x[k], rows.loc[k, "mean"], r.method, "0.3"))
        _place_labels(ax, labels)
        ax.set_xlabel("generator input tokens per query (prompt + context, o200k_base)")
        ax.set_ylabel(f"{title} (%, 95% CI)")
        ax.set_title(f"{title} against generator input")
        ax.grid(alpha=0.3)
    axes[0].plot([], [], "s", color="0.45", label="other methods (Table 1)")
    axes[0].legend(fontsize=7, loc="best")
    fig.suptitle(f"Fig. 3: accuracy-cost frontier on {DATASET_TITLES.get(dataset, dataset)}", fontsize=11)
    return save(fig, allr, out), data


def _place_labels(ax, labels: Sequence[tuple[float, float, str, str]]) -> None:
    """Point labels moved apart where they would overlap (adjustText), each tied to its point by a thin line."""
    from adjustText import adjust_text

    texts = [ax.text(x, y, text, fontsize=6.5, color=color) for x, y, text, color in labels]
    if texts:
        points = ax.scatter([x for x, *_ in labels], [y for _, y, *_ in labels], s=30, alpha=0)  # kept clear
        adjust_text(texts, ax=ax, objects=points, arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5})


# --------------------------------------------------------------------------------------------------- fig 4
def fig4(
    theta: Sequence[Run], dsigma: Sequence[Run], out: Path, dataset: str
) -> tuple[list[Path], pd.DataFrame]:
    plt = pyplot()
    fig, axes = plt.subplots(2, 4, figsize=(13, 6))
    data = []
    for row, (runs, key, name, default) in enumerate(
        ((theta, "atc.theta", "theta (ATC confidence threshold)", 0.9),
         (dsigma, "method.links.d_sigma", "d_sigma (semantic out-degree cap)", 8))
    ):  # fmt: skip
        runs = sorted(runs, key=lambda r: float(r.value(key)))
        xs = [float(r.value(key)) for r in runs]
        ci = _intervals(runs, ["f1", R_K]) if runs else pd.DataFrame()
        if runs:
            part = _points(runs, ci, xs, [key] * len(runs)).rename(columns={"x": "value", "kind": "swept"})
            data.append(
                part.assign(
                    visible_pct=[surface_share(r) for r in runs], search_ms=[search_ms(r) for r in runs]
                )
            )
        panels = [
            ("F1 (%, 95% CI)", "f1"),
            (f"{R_K} (%, 95% CI)", R_K),
            ("visible units at end (% of turns N)", [surface_share(r) for r in runs]),
            ("Stages 1-3 time per query (ms)", [search_ms(r) for r in runs]),
        ]
        for col, (ylabel, what) in enumerate(panels):
            ax = axes[row, col]
            if isinstance(what, str):
                rows = ci[ci["metric"] == what].set_index("run").sort_index() if runs else pd.DataFrame()
                if runs:
                    ax.errorbar(xs, rows["mean"], yerr=_yerr(rows), fmt="-o", capsize=3, ms=4)
            else:
                ax.plot(xs, [np.nan if v is None else v for v in what], "-o", ms=4, color="tab:green")
            ax.axvline(default, color="0.6", ls=":", lw=1)
            ax.set_xlabel(name)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(ylabel.split(" (")[0])
    fig.suptitle(f"Fig. 4: sensitivity of All-Mem on {DATASET_TITLES.get(dataset, dataset)} "
                 "(dotted: default)", fontsize=11)  # fmt: skip
    return save(fig, [*theta, *dsigma], out), pd.concat(data, ignore_index=True) if data else pd.DataFrame()


# --------------------------------------------------------------------------------------------------- fig 5
def _theta_label(run: Run) -> str:
    return f"{run.method}, theta={run.value('atc.theta')}"


def fig5(
    surface_runs: Sequence[Run], stage_runs: Sequence[Run], out: Path, dataset: str
) -> tuple[list[Path], pd.DataFrame]:
    plt = pyplot()
    data: list[dict] = []
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    ax = axes[0]
    top = 0
    cmap = plt.get_cmap("plasma")
    ordered = sorted(surface_runs, key=lambda r: float(r.value("atc.theta") or 0))
    for j, run in enumerate(ordered):
        color = cmap(j / max(1, len(ordered) - 1) * 0.85)
        events = [e for e in run.events("run")]
        by_d: dict[str, list[tuple[int, int]]] = {}
        for e in events:
            by_d.setdefault(str(e.get("dialogue")), []).append((int(e["turn"]), int(e["n_visible"])))
            data.append({"panel": "a", "run_dir": str(run.path), "method": run.method, "theta": run.value("atc.theta"),
                         "dialogue": e.get("dialogue"), "N": e["turn"], "n_units": e.get("n_units"),
                         "n_visible": e["n_visible"]})  # fmt: skip
        for i, pts in enumerate(by_d.values()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", ms=2.5, lw=0.9, color=color, alpha=0.8,
                    label=_theta_label(run) if i == 0 else None)  # fmt: skip
            top = max([top, *[p[0] for p in pts]])
    ax.plot([0, top], [0, top], "k--", lw=1, label="append-only |V+| = N")
    ax.set_xlabel("history length N (turns written)")
    ax.set_ylabel("visible surface |V+| (units)")
    ax.set_title("(a) visible surface at each ATC checkpoint")
    ax.legend(fontsize=6.5)
    ax.grid(alpha=0.3)

    ax = axes[1]
    names = [r.method for r in stage_runs]
    bottom = np.zeros(len(stage_runs))
    for stage in ("embed", *STAGES):
        vals = []
        for run in stage_runs:
            lat = [float((r.get("latency_ms") or {}).get(stage, np.nan)) for r in run.end_records()]
            vals.append(np.nanmean(lat) if lat and not np.all(np.isnan(lat)) else 0.0)
        ax.bar(names, vals, bottom=bottom, label=STAGE_LABELS[stage])
        data += [{"panel": "b", "run_dir": str(r.path), "method": r.method, "stage": stage, "ms": v}
                 for r, v in zip(stage_runs, vals, strict=True)]  # fmt: skip
        bottom += np.array(vals)
    ax.set_ylabel("mean time per query (ms)")
    ax.set_title("(b) Mem-Lat by stage")
    ax.tick_params(axis="x", labelrotation=15, labelsize=7)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")

    ax = axes[2]
    default = [r for r in ordered if float(r.value("atc.theta") or 0) == 0.9] or ordered[:1]
    lowest = ordered[:1] if ordered and ordered[0] not in default else []
    for run, style in [*[(r, "-") for r in default], *[(r, ":") for r in lowest]]:
        probes = run.events("probe")
        if not probes:
            continue
        df = pd.DataFrame(probes).sort_values("turn")
        data += [{"panel": "c", "run_dir": str(run.path), "method": run.method, "theta": run.value("atc.theta"),
                  "dialogue": p.get("dialogue"), "N": p["turn"], "n_units": p["n_units"], "n_visible": p["n_visible"],
                  "stage1_full_ms": p["stage1_full_ms"], "stage1_visible_ms": p["stage1_visible_ms"]} for p in probes]  # fmt: skip
        for surface, color in (("full", "tab:red"), ("visible", "tab:blue")):
            ax.scatter(df["turn"], df[f"stage1_{surface}_ms"], s=6, color=color, alpha=0.35)
            bins = pd.cut(df["turn"], bins=min(8, max(2, len(df) // 4)))
            med = df.groupby(bins, observed=True).agg(
                x=("turn", "median"), y=(f"stage1_{surface}_ms", "median")
            )
            ax.plot(
                med["x"],
                med["y"],
                style,
                color=color,
                lw=1.5,
                label=f"{'full bank V_N' if surface == 'full' else 'visible surface V+'} ({_theta_label(run)})",
            )
    ax.set_xlabel("history length N (turns written)")
    ax.set_ylabel("Stage 1 top-k time per query (ms, median)")
    ax.set_title("(c) Stage 1 on the full bank vs the visible surface")
    ax.legend(fontsize=6.5)
    ax.grid(alpha=0.3)
    fig.suptitle(
        f"Fig. 5: surface and latency diagnostics on {DATASET_TITLES.get(dataset, dataset)}", fontsize=11
    )
    note = ("(b): embedding time is a cache lookup for questions embedded by an earlier run; (c): probe queries are "
            "unit embeddings, searched with the run's vector backend and k=10 at every checkpoint")  # fmt: skip
    return save(fig, [*surface_runs, *stage_runs], out, note), pd.DataFrame(data)


# --------------------------------------------------------------------------------------------------- fig 6
def fig6(runs: Sequence[Run], out: Path, dataset: str) -> tuple[list[Path], pd.DataFrame]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    drawn = 0
    data = []
    styles = [("-", "o"), ("--", "s"), ("-.", "^"), (":", "D"), ("-", "v"), ("--", "P")]
    reach_all = 0
    for j, run in enumerate(sorted(runs, key=lambda r: float(r.value("atc.theta") or 0))):
        rec = pooled_recoverability(run)
        if not rec.get("n_archived"):
            continue
        hs = sorted(rec["curve"])
        ys = [100 * rec["curve"][h] for h in hs]
        h95 = rec["h95"] if rec["h95"] is not None else max(hs)
        reach_all = max(reach_all, next((h for h, y in zip(hs, ys, strict=True) if y >= 100.0), max(hs)), h95)
        label = (f"theta={run.value('atc.theta')}: {rec['n_archived']} archived, {100 * rec['unreachable_share']:.1f}% "
                 f"unreachable, median h={rec['median_h']}, H95={rec['h95']}")  # fmt: skip
        line, marker = styles[j % len(styles)]
        ax.step(hs, ys, where="post", label=label, lw=1.4, ls=line, marker=marker, ms=5, alpha=0.85)
        data += [{"run_dir": str(run.path), "method": run.method, "theta": run.value("atc.theta"), "H": h,
                  "reachable_pct": y, "n_archived": rec["n_archived"]} for h, y in zip(hs, ys, strict=True)]  # fmt: skip
        drawn += 1
    if not drawn:
        ax.text(0.5, 0.5, "no archived units in these runs", ha="center", transform=ax.transAxes)
    else:
        ax.set_xlim(-0.2, min(10, reach_all + 3) + 0.2)
    ax.set_xlabel("hop budget H (directed typed links)")
    ax.set_ylabel("archived units reachable within H (%)")
    ax.set_ylim(0, 102)
    ax.set_title(f"Fig. 6: recoverability R(H) on {DATASET_TITLES.get(dataset, dataset)}")
    ax.legend(fontsize=6.5, loc="lower right")
    ax.grid(alpha=0.3)
    frame = pd.DataFrame(data)
    note = ""
    if drawn > 1 and (frame.groupby("H")["reachable_pct"].agg(lambda v: v.max() - v.min()) < 0.5).all():
        note = "The curves coincide (within 0.5 points at every H): they are drawn on top of each other."
    return save(fig, runs, out, note), frame
