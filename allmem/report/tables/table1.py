"""Table 1: methods × (4o-J, F1, BLEU-1, ROUGE-L, R@5, N@5) with 95% intervals, mean context tokens, paired
tests against All-Mem; per category (LoCoMo) or question type (LongMemEval-s); LoCoMo's held-out conversations.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pandas as pd
from hydra.utils import get_class
from omegaconf import OmegaConf

from allmem.defaults import CONFIG_DIR
from allmem.metrics.protocols import get_protocol
from allmem.report import stats
from allmem.report.compare import N_K, OVERALL, R_K, Cells, by_dialogue, compare
from allmem.report.compare import metric_title as compare_title
from allmem.report.items import end_frame
from allmem.report.provenance import DATASET_TITLES
from allmem.report.runs import Run
from allmem.report.tables import markdown, views
from benchmarks import fit_split

REFERENCE = "allmem"  # All-Mem with consolidation: the row every other method is tested against
LOCOMO_CATEGORIES = {
    "1": "multi-hop",
    "2": "temporal",
    "3": "open-domain",
    "4": "single-hop",
    "5": "adversarial",
}


def table_metrics(runs: Sequence[Run]) -> list[str]:
    """The protocol's table columns (4o-J first), from the first run's metrics.json."""
    for run in runs:
        names = run.metrics.get("table_metrics")
        if names:
            return list(names)
    return get_protocol("allmem").table_metrics()


def row_name(run: Run, experiment: str = "table1") -> str:
    """A run's row: its method, with the experiment named when it is not Table 1's own (the Stage 1 variants
    run ``allmem_noatc`` under ``experiment=stage1_*``). Named by the experiment that asks for the run, not by
    the run's own label: one run serves every experiment with its config, under whichever name made it first."""
    return run.method if experiment == "table1" else f"{run.method},experiment={experiment}"


def frames_of(runs: Sequence[Run], names: Sequence[str] | None = None) -> dict[str, pd.DataFrame]:
    names = names or [run.method for run in runs]
    return {name: end_frame(run) for name, run in zip(names, runs, strict=True)}  # one record per question


def compute(runs: Sequence[Run], dataset: str, names: Sequence[str] | None = None) -> pd.DataFrame:
    """The long frame of Table 1 for one dataset: subsets all (and fit / held-out on LoCoMo); ``names``: the
    row of each run (default: its method)."""
    frames = frames_of(runs, names)
    metrics = table_metrics(runs)
    reference = REFERENCE if REFERENCE in frames else None
    parts = [compare(frames, metrics, reference, subset="all")]
    fit = fit_split(dataset) if dataset == "locomo" else ()
    if fit:
        parts.append(
            compare(by_dialogue(frames, fit, False), metrics, reference, subset="held-out", by_group=False)
        )
        parts.append(
            compare(by_dialogue(frames, fit, True), metrics, reference, subset="fit", by_group=False)
        )
    if dataset == "locomo":  # overall without category 5 and with the answer-key errata (report/views.py)
        parts.append(views.compute(runs, names or [r.method for r in runs], frames, metrics, reference))
    out = pd.concat(parts, ignore_index=True)
    tokens = {k: f.loc[f["included"], "context_tokens"].astype(float).mean() for k, f in frames.items()}
    out["context_tokens"] = out["label"].map(tokens)
    out.insert(0, "dataset", dataset)
    return out


STAGE1_SEARCH = {"dense": "dense", "bm25": "lexical", "hybrid": "dense+lexical", "fused": "dense+lexical"}
# a method config whose comments name a fitting script carries constants fitted on the fit conversations
FIT_MARKS = ("fit_retrieval.py", "fit_baselines.py")


def search_of(run: Run) -> str:
    """How a run's method searches, from its config: the class's ``search_kind`` (``allmem.systems``), with
    All-Mem's Stage 1 read from ``method.retrieval.stage1``."""
    method = run.cfg.method
    try:
        kind = str(getattr(get_class(str(method._target_)), "search_kind", "unknown"))
    except Exception:  # a run folder whose class is gone: say so rather than guess
        return "unknown"
    stage1 = OmegaConf.select(method, "retrieval.stage1", default=None)
    if stage1 is not None and kind.endswith("+links"):
        kind = f"{STAGE1_SEARCH.get(str(stage1), str(stage1))}+links"
    return kind


def fitted_of(run: Run) -> bool:
    """Whether the method's config file (or one it extends) says its constants were fitted on LoCoMo."""
    seen: set[str] = set()
    todo = [str(run.cfg.method.name)]
    while todo:
        name = todo.pop()
        path = CONFIG_DIR / "method" / f"{name}.yaml"
        if name in seen or not path.exists():
            continue
        seen.add(name)
        text = path.read_text(encoding="utf-8")
        if any(mark in text for mark in FIT_MARKS):
            return True
        todo += re.findall(r"^\s*-\s*([A-Za-z0-9_]+)\s*$", text, re.M)  # the ``defaults:`` list
    return False


def like_for_like_note(runs: Sequence[Run]) -> str:
    """Table 1's footer: which rows search by embedding alone, which add lexical search, graph or links, which
    carry constants fitted on the fit conversations; derived from each run's method config."""
    groups: dict[str, list[str]] = {}
    fitted = []
    for run in runs:
        groups.setdefault(search_of(run), []).append(f"`{run.method}`")
        if fitted_of(run):
            fitted.append(f"`{run.method}`")
    parts = [f"{kind}: {', '.join(labels)}" for kind, labels in sorted(groups.items())]
    out = (
        "Search at question time (like-for-like rows share a kind; all embed with the same model): "
        + "; ".join(parts)
        + "."
    )
    if fitted:
        out += (
            f" Constants fitted on the fit conversations (scripts/fit_retrieval.py, scripts/fit_baselines.py for the"
            f" baselines' offline roles): {', '.join(fitted)}."
        )
    out += " Every row is read by the same reader (`generator=`); see docs/BASELINES.md for per-system simplifications."
    return out


def _judge_note(runs: Sequence[Run]) -> str:
    if all(r.judge is None and r.metrics.get("overall", {}).get("judge") is None for r in runs):
        reasons = {r.metrics.get("overall", {}).get("judge_reason") for r in runs} - {None}
        return f"4o-J is n/a: {'; '.join(sorted(reasons)) or 'no LLM judge ran'}."
    return ""


def judge_of(runs: Sequence[Run]) -> str | None:
    """The judges' model names, joined, when any run was judged (headed in place of "4o-J" unless gpt-4o)."""
    models = sorted({m for r in runs if r.judge is None and (m := r.judge_model)})
    return ", ".join(models) or None


def markdown_for(table: pd.DataFrame, runs: Sequence[Run], dataset: str) -> str:
    metrics = table_metrics(runs)
    judge = judge_of(runs)

    def metric_title(name: str) -> str:  # the judge's column named by its model
        return compare_title(name, judge)

    labels = list(dict.fromkeys(table["label"]))
    title = DATASET_TITLES.get(dataset, dataset)
    all_rows = table[table["subset"] == "all"]
    cell = Cells(all_rows)
    n_q = int(all_rows[(all_rows["group"] == OVERALL)]["n"].max() or 0)
    out = [f"## {title}: {n_q} questions"]
    if dataset == "longmemeval_s":
        out.append(
            f"{R_K} and {N_K} are session-level (evidence = answer sessions), so not comparable to LoCoMo's."
        )
    header = ["Method", *[metric_title(m) for m in metrics], "Context tokens", "n"]
    rows = []
    for label in labels:
        tokens = all_rows.loc[all_rows["label"] == label, "context_tokens"].iloc[0]
        n = all_rows[
            (all_rows["label"] == label) & (all_rows["group"] == OVERALL) & (all_rows["metric"] == "f1")
        ]
        rows.append([label, *[cell(label, m) for m in metrics], f"{tokens:.0f}",
                     int(n["n"].iloc[0]) if not n.empty else "n/a"])  # fmt: skip
    out.append(markdown(header, rows))
    if (all_rows["reference"].notna()).any():
        ref = all_rows["reference"].dropna().iloc[0]
        out.append(f"Difference to `{ref}` on the same questions (this − {ref}, points) and paired p:")
        rows = [[label, *[cell(label, m, what="delta") for m in metrics]] for label in labels if label != ref]
        out.append(markdown(["Method", *[metric_title(m) for m in metrics]], rows))
    else:
        out.append(f"No `{REFERENCE}` run among these, so no paired tests.")
    groups = sorted((g for g in dict.fromkeys(all_rows["group"]) if g != OVERALL), key=_natural)
    if groups:
        kind = "category" if dataset == "locomo" else "question type"
        for metric in [m for m in metrics if m in ("judge", "f1", R_K, N_K)]:
            if all(cell(lab, metric) == "n/a" for lab in labels):
                continue
            names = [f"{g} {LOCOMO_CATEGORIES[g]}" if dataset == "locomo" and g in LOCOMO_CATEGORIES else g
                     for g in groups]  # fmt: skip
            out.append(f"### {metric_title(metric)} per {kind}")
            rows = [[label, *[cell(label, metric, group=g) for g in groups]] for label in labels]
            both = dataset == "locomo" and views.ADVERSARIAL in groups  # overall with and without category 5
            if both:
                no5 = Cells(table[table["subset"] == "no-cat5"])
                rows = [[*row, cell(label, metric, what="mean"), no5(label, metric, what="mean")]
                        for row, label in zip(rows, labels, strict=True)]  # fmt: skip
            out.append(markdown(["Method", *names, *(["overall", "overall w/o 5"] if both else [])], rows))
    if (table["subset"] == "no-cat5").any():
        out.append(views.markdown_section(table, metrics))
    if graded := views.graded_section(runs, list(dict.fromkeys(table["label"]))):
        out.append(graded)
    fit_ids = ", ".join(sorted(set(fit_split(dataset)))) if dataset == "locomo" else ""
    for subset, what in (
        ("held-out", f"the conversations nothing was fitted on (all but {fit_ids})"),
        ("fit", f"the conversations the offline reader's constants were fitted on ({fit_ids})"),
    ):
        part = table[table["subset"] == subset]
        n = int(part[(part["group"] == OVERALL)]["n"].max() or 0) if not part.empty else 0
        if not n:
            continue
        out.append(f"### {subset.capitalize()}: {what}")
        in_part = Cells(part)
        rows = [[label, *[in_part(label, m) for m in metrics], *[in_part(label, m, what="delta") for m in ("f1", R_K)]]
                for label in labels]  # fmt: skip
        out.append(
            markdown(
                ["Method", *[metric_title(m) for m in metrics], "ΔF1 vs All-Mem", f"Δ{R_K} vs All-Mem"], rows
            )
        )
        out.append(f"({n} questions.)")
    out.append(like_for_like_note(runs))
    note = _judge_note(runs)
    if note:
        out.append(note)
    return "\n\n".join(out)


def _natural(key: str) -> tuple:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", key) if p)


def stats_note() -> str:
    return stats.describe() + "."
