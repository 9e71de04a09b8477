"""MemGPT's context window (``make memgpt_window``; issue 22, item 5): one row per window of the sweep in
``configs/experiment/memgpt_window.yaml``, on LongMemEval-length haystacks.

Scores: F1, R@k and N@k (the table's k) over the questions, with 95% bootstrap intervals, and the paired difference
from the smallest window (``allmem.report.compare``). Memory, from each haystack's ``system_stats.jsonl`` line
(written after its stream is ingested, ``baselines/memgpt.py``): the share of turns evicted from the main
context (summarised away; they stay in recall storage), evictions and pressure alerts per haystack, archival
rows written per haystack, evicted turns never offered to the agent, and the main context at the stream's end.
What the answer saw, from ``contexts.jsonl.gz``: packed units per question, and how many were archival rows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from allmem import files
from allmem.metrics.retrieval import ndcg_key, recall_key
from allmem.report.compare import compare, fmt_ci, fmt_delta, metric_title
from allmem.report.figures import pyplot
from allmem.report.figures.paper import save
from allmem.report.items import item_frame
from allmem.report.runs import Run
from allmem.report.tables import markdown

WINDOW = "method.context_window"
TITLES = {"lme_synth": "Synthetic haystacks with LongMemEval-s's shape"}  # targets.ONLY_ON's label
ARCHIVAL = re.compile(r"a\d+")  # MemGPT's archival row ids (``baselines/memgpt.py``, ``ArchivalRow``)
DEFINITIONS = (
    "Evicted: turns summarised out of the main context by the end of the stream, over all turns streamed (they "
    "stay searchable in recall storage). Never offered: evicted turns that no memory-pressure step showed the "
    "agent, so it could not archive them first (share of the evicted in brackets); 0 since every turn no alert "
    "showed is offered in a step just before its eviction. "
    "Archival rows: archival_memory_insert rows written per haystack. Main context: system, core memory and "
    "queue tokens at the stream's end (o200k_base). Packed: units in the answer's context per question, and "
    "how many of them were archival rows.",
    "Searches per question are not recorded per question: the offline planner (baselines/memgpt_offline.py) "
    "issues the same plan at every window (archival search pages 0 and 1, then a recall search, page 0, for up "
    "to three of the question's words), so the window changes what the searches find, not how many there are.",
)


def window_of(run: Run) -> int:
    value = run.value(WINDOW)
    if value is None:
        raise ValueError(f"{run.path}: no {WINDOW} in its config.yaml (not a MemGPT run)")
    return int(value)


def _packed(run: Run) -> tuple[float, float]:
    """Mean packed units per question and mean archival rows among them (0, 0 when no contexts were stored)."""
    units, archival, n = 0, 0, 0
    for ctx in files.read_jsonl(run.path / files.CONTEXTS):
        ids = [str(u.get("id", "")) for u in ctx.get("units") or ()]
        units += len(ids)
        archival += sum(1 for i in ids if ARCHIVAL.fullmatch(i))
        n += 1
    return (units / n, archival / n) if n else (0.0, 0.0)


def memory_row(run: Run) -> dict[str, Any]:
    """The memory columns of one run, summed or averaged over its haystacks' stats lines."""
    lines = list(run.stats().values())
    if not lines:
        raise ValueError(f"{run.path}: no system_stats.jsonl lines")

    def total(key: str) -> int:
        return sum(int(s.get(key, 0)) for s in lines)  # a count of zero is left out of a stats line

    turns, evicted = total("turns"), total("evicted_messages")
    packed, archival_packed = _packed(run)
    return {
        "haystacks": len(lines),
        "turns": turns,
        "evicted": evicted,
        "evicted_share": 100 * evicted / turns if turns else None,
        "never_offered": total("evicted_never_offered"),
        "evictions_per_haystack": total("evictions") / len(lines),
        "alerts_per_haystack": total("pressure_alerts") / len(lines),
        "archival_rows_per_haystack": total("archival_rows") / len(lines),
        "main_context_tokens": total("context_tokens") / len(lines),
        "packed_units": packed,
        "packed_archival": archival_packed,
    }


def compute(runs: Sequence[Run]) -> pd.DataFrame:
    """One row per run (window, ascending): memory columns, then each metric's mean, interval and paired
    difference from the smallest window."""
    runs = sorted(runs, key=window_of)
    k = runs[0].protocol.table_k
    metrics = [m for m in ("f1", recall_key(k), ndcg_key(k)) if m in runs[0].protocol.metric_names()]
    frames = {str(window_of(r)): item_frame(r) for r in runs}
    scores = compare(frames, metrics, str(window_of(runs[0])), by_group=False, tests=True)
    rows = []
    for run in runs:
        label = str(window_of(run))
        row: dict[str, Any] = {"window": window_of(run), "label": run.label, "run_dir": str(run.path)}
        row.update(memory_row(run))
        for m in metrics:
            hit = scores[(scores["label"] == label) & (scores["metric"] == m)].iloc[0]
            row.update({m: hit["mean"], f"{m}_ci_low": hit["ci_low"], f"{m}_ci_high": hit["ci_high"],
                        f"{m}_delta": hit["delta"], f"{m}_p": hit["p"], "n": hit["n"]})  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows)


def _metrics(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if c in ("f1",) or re.fullmatch(r"[RN]@\d+", str(c))]


def markdown_for(table: pd.DataFrame) -> str:
    metrics = _metrics(table)
    smallest = int(table["window"].min())
    header = ["Window (tokens)", *[metric_title(m) for m in metrics],
              *[f"Δ{metric_title(m)} vs {smallest:,}" for m in metrics], "Evicted", "Never offered",
              "Evictions / haystack", "Alerts / haystack", "Archival rows / haystack", "Main context (tokens)",
              "Packed units (archival)", "n"]  # fmt: skip
    rows = []
    for _, r in table.iterrows():
        never = f"{r['never_offered']:,}" + (
            f" ({100 * r['never_offered'] / r['evicted']:.1f}%)" if r["evicted"] else ""
        )
        rows.append([
            f"{int(r['window']):,}",
            *[fmt_ci(r[m], r[f"{m}_ci_low"], r[f"{m}_ci_high"]) for m in metrics],
            *["—" if int(r["window"]) == smallest else fmt_delta(r[f"{m}_delta"], r[f"{m}_p"]) for m in metrics],
            f"{r['evicted_share']:.1f}% ({r['evicted']:,} of {r['turns']:,})", never,
            f"{r['evictions_per_haystack']:.1f}", f"{r['alerts_per_haystack']:.1f}",
            f"{r['archival_rows_per_haystack']:.1f}", f"{r['main_context_tokens']:,.0f}",
            f"{r['packed_units']:.1f} ({r['packed_archival']:.1f})", int(r["n"]),
        ])  # fmt: skip
    return markdown(header, rows)


def figure(table: pd.DataFrame, runs: Sequence[Run], out: Path) -> list[Path]:
    """Left: the share of turns evicted against the window; right: F1 and R@k with their intervals."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    t = table.sort_values("window")
    left.plot(t["window"], t["evicted_share"], "-o", label="evicted")
    left.plot(t["window"], 100 * t["never_offered"] / t["turns"], "-s", label="evicted, never offered")
    left.set_ylabel("% of turns streamed")
    for m in [m for m in _metrics(t) if not m.startswith("N@")]:
        yerr = [t[m] - t[f"{m}_ci_low"], t[f"{m}_ci_high"] - t[m]]
        right.errorbar(t["window"], t[m], yerr=yerr, fmt="-o", capsize=3, label=metric_title(m))
    right.set_ylabel("score (%, 95% CI)")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(t["window"]), [f"{w // 1024}k" for w in t["window"]])
        ax.set_xlabel("MemGPT context window (tokens)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("MemGPT's context window on LongMemEval-length haystacks", fontsize=10)
    return save(fig, runs, out)
