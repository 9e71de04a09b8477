"""The summarise step of the paper targets: complete run directories → ``results/tables`` and ``results/figures``.

``allmem report table1 fig3 --runs results/runs/paper --out results`` composes the points of each target's
experiments (``allmem/report/targets.py``), reads the complete run with each point's config hash, and writes
Markdown and CSV tables, PNG and PDF figures, and ``per_question.parquet``. A point without a complete run is
named under its table as missing; it never turns into a number.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pandas as pd

from allmem import files
from allmem.errors import ConfigError
from allmem.report import stats
from allmem.report.figures import fig7
from allmem.report.figures import paper as paper_figures
from allmem.report.frame import write_parquet
from allmem.report.provenance import DATASET_TITLES, ask_note, footer
from allmem.report.runs import Run, check_same_code, with_judge
from allmem.report.tables import ablations, cost, retrieval, table1, table5, table8
from allmem.report.tables import equal_context as equal_context_view
from allmem.report.tables import memgpt_window as window_view
from allmem.report.tables import retention as retention_view
from allmem.report.tables.atc import table3_frame, table3_markdown
from allmem.report.targets import LME_SKIPPED, ONLY_ON, TARGETS, Point, collect, expand, experiments_of
from benchmarks import fit_split

log = logging.getLogger("allmem.report")
Found = dict[str, dict[str, list[Point]]]


# Each target of the registry (allmem/report/targets.ini) has one renderer here, marked ``@renders(name)``.
RENDER: dict[str, Callable[[Found, Path, Path], list[Path]]] = {}
STANDALONE: dict[
    str, Callable[[Found, Path, Path, str | None], list[Path]]
] = {}  # given the LongMemEval file too


def renders(name: str, lme: bool = False) -> Callable[[Callable], Callable]:
    """Mark the function that writes target ``name``'s tables and figures (``lme``: it is given the --lme file)."""

    def mark(fn: Callable) -> Callable:
        if name not in TARGETS:
            raise ValueError(f"@renders({name!r}): no such target in allmem/report/targets.ini")
        (STANDALONE if lme else RENDER)[name] = fn
        return fn

    return mark


def _runs(found: Found, experiment: str, dataset: str) -> list[Run]:
    return [p.run for p in found.get(experiment, {}).get(dataset, []) if p.run is not None]


def _missing(found: Found, experiments: Sequence[str]) -> list[str]:
    out = []
    for exp in experiments:
        for ds, pts in found.get(exp, {}).items():
            gone = [p.label for p in pts if p.run is None]
            if gone:
                out.append(f"Missing (not run, failed or incomplete) in {exp} on {ds}: {'; '.join(gone)}.")
    return out


def _datasets(found: Found) -> list[str]:
    return list(dict.fromkeys(ds for per in found.values() for ds in per))


def _lme_note(found: Found) -> str:
    return "" if "longmemeval_s" in _datasets(found) else LME_SKIPPED + "."


def _suffix(dataset: str) -> str:
    """A figure's file name suffix per dataset: none for LoCoMo, ``_lme`` for LongMemEval-s, else the name."""
    return "" if dataset == "locomo" else "_lme" if dataset == "longmemeval_s" else f"_{dataset}"


def _write(text: str, frame: pd.DataFrame | None, tables: Path, name: str) -> list[Path]:
    tables.mkdir(parents=True, exist_ok=True)
    md = tables / f"{name}.md"
    files.write_atomic(md, text.rstrip() + "\n")
    paths = [md]
    if frame is not None and not frame.empty:
        files.write_atomic(tables / f"{name}.csv", frame.to_csv(index=False))
        paths.append(tables / f"{name}.csv")
    return paths


# ------------------------------------------------------------------------------------------------ tables
@renders("table1")
def render_table1(found: Found, tables: Path, figures: Path) -> list[Path]:
    sections, frames, runs_all = [f"# {TARGETS['table1'].title}"], [], []
    experiments = TARGETS["table1"].experiments  # the methods, then the Stage 1 variants
    for ds in _datasets(found):
        named = [(r, table1.row_name(r, e)) for e in experiments for r in _runs(found, e, ds)]
        if not named:
            continue
        runs = [r for r, _ in named]
        table = table1.compute(runs, ds, [name for _, name in named])
        frames.append(table)
        runs_all += runs
        sections.append(table1.markdown_for(table, runs, ds))
    notes = [_lme_note(found), *_missing(found, experiments), table1.stats_note(),
             "Context tokens: mean tokens of retrieved evidence packed into the generator context (o200k_base, "
             "after the matched budget)."]  # fmt: skip
    sections.append(footer(runs_all, "table1", [*notes, ask_note(runs_all)]))
    frame = pd.concat(frames, ignore_index=True) if frames else None
    return _write("\n\n".join(sections), frame, tables, "table1")


def _render_by_dataset(
    found: Found,
    tables: Path,
    name: str,
    pick: Callable[[str], list[Run]],
    build: Callable[[list[Run], str], tuple[pd.DataFrame, str]],
    notes: Sequence[str],
    every_ask: bool = False,
) -> list[Path]:
    """A table with one section per dataset: ``pick`` its runs, ``build`` (frame, Markdown) from them; a dataset
    without runs has no section. One footer names every run used, then ``notes`` (and, unless the table reads
    ``every_ask`` point, that runs with two ask points are read at the stream's end: ``provenance.ask_note``)."""
    sections, frames, runs_all = [f"# {TARGETS[name].title}"], [], []
    for ds in _datasets(found):
        runs = pick(ds)
        if runs:
            frame, markdown = build(runs, ds)
            frames.append(frame)
            runs_all += runs
            sections += [f"## {DATASET_TITLES.get(ds, ds)}", markdown]
    sections.append(footer(runs_all, name, [*notes, "" if every_ask else ask_note(runs_all)]))
    frame = pd.concat(frames, ignore_index=True) if frames else None
    return _write("\n\n".join(sections), frame, tables, name)


@renders("retrieval")
def render_retrieval(found: Found, tables: Path, figures: Path) -> list[Path]:
    """Retrieval at every granularity (allmem/report/tables/retrieval.py) for Table 1's runs."""

    def build(runs: list[Run], ds: str) -> tuple[pd.DataFrame, str]:
        t = retrieval.compute(runs)
        k = runs[0].protocol.table_k
        return t, retrieval.markdown_for(t, k)

    notes = [_lme_note(found), *_missing(found, ["table1"]), *retrieval.DEFINITIONS]
    return _render_by_dataset(found, tables, "retrieval", lambda ds: _runs(found, "table1", ds), build, notes)


def _render_view(
    found: Found, tables: Path, figures: Path, name: str, view: ModuleType, every_ask: bool = False
) -> list[Path]:
    """A view module's table (``view.compute``, ``view.markdown_for``, ``view.DEFINITIONS``) over the runs of the
    experiment ``name``, and per dataset its figure (``view.figure``) as ``<name><suffix>``."""
    drawn: list[Path] = []

    def build(runs: list[Run], ds: str) -> tuple[pd.DataFrame, str]:
        t = view.compute(runs)
        if not t.empty:
            drawn.extend(view.figure(t, runs, figures / f"{name}{_suffix(ds)}", ds))
        return t, view.markdown_for(t)

    notes = [_lme_note(found), *_missing(found, [name]), *view.DEFINITIONS]
    written = _render_by_dataset(
        found, tables, name, lambda ds: _runs(found, name, ds), build, notes, every_ask
    )
    return written + drawn


@renders("retention")
def render_retention(found: Found, tables: Path, figures: Path) -> list[Path]:
    """The retention view (allmem/report/tables/retention.py): table and, per dataset, a figure by session distance; it
    reads both ask points of a run."""
    return _render_view(found, tables, figures, "retention", retention_view, every_ask=True)


@renders("equal_context")
def render_equal_context(found: Found, tables: Path, figures: Path) -> list[Path]:
    """The equal-context view (allmem/report/tables/equal_context.py): table and, per dataset, a figure by packed tokens."""
    return _render_view(found, tables, figures, "equal_context", equal_context_view)


@renders("table2")
def render_table2(found: Found, tables: Path, figures: Path) -> list[Path]:
    def build(runs: list[Run], ds: str) -> tuple[pd.DataFrame, str]:
        t = cost.compute(runs)
        return t, cost.markdown_for(t)

    notes = [_lme_note(found), *_missing(found, ["table1"]), *cost.DEFINITIONS,
             "Offline token counts are the rendered prompts of the rule-based roles (what an LLM would have read), "
             "and offline latencies are those roles' CPU time, not an LLM's. Latencies are wall times on the machine "
             "that ran them (shared or not). A text's embedding, and an offline role's reply that declares its inputs "
             "(All-Mem's turn descriptions), are computed once and then read from the on-disk cache the runs "
             "share, so the first run to need one pays for it."]  # fmt: skip
    return _render_by_dataset(found, tables, "table2", lambda ds: _runs(found, "table1", ds), build, notes)


@renders("table3")
def render_table3(found: Found, tables: Path, figures: Path) -> list[Path]:
    def build(runs: list[Run], ds: str) -> tuple[pd.DataFrame, str]:
        t = table3_frame(runs)
        return t, table3_markdown(t)

    notes = [_lme_note(found), *_missing(found, ["table1"]),
             "Diagnosis events are units diagnosed; operator events are queued targets, each Executed, Skipped "
             "(stale or invalid) or No-op (the planner declined). Tokens and time per operator event are its "
             "planning calls (Split includes the siblings' descriptors)."]  # fmt: skip
    return _render_by_dataset(
        found,
        tables,
        "table3",
        lambda ds: [r for r in _runs(found, "table1", ds) if r.consolidates],
        build,
        notes,
    )


@renders("table4")
def render_table4(found: Found, tables: Path, figures: Path) -> list[Path]:
    def build(runs: list[Run], ds: str) -> tuple[pd.DataFrame, str]:
        t, extra = ablations.compute(runs)
        return t.merge(extra, on="label", how="left").assign(dataset=ds), ablations.markdown_for(
            t, extra, runs
        )

    notes = [_lme_note(found), *_missing(found, ["ablations"]), table1.stats_note()]
    return _render_by_dataset(found, tables, "table4", lambda ds: _runs(found, "ablations", ds), build, notes)


@renders("ablations_hybrid")
def render_ablations_hybrid(found: Found, tables: Path, figures: Path) -> list[Path]:
    def build(runs: list[Run], ds: str) -> tuple[pd.DataFrame, str]:
        t = ablations.compute_hybrid(runs, fit_split(ds) if ds == "locomo" else ()).assign(dataset=ds)
        return t, ablations.hybrid_markdown(t)

    notes = [_lme_note(found), *_missing(found, ["ablations_hybrid"]), table1.stats_note(),
             "The fit conversations are those allmem_hybrid's values were chosen on (scripts/fit_retrieval.py); the "
             "held-out rows are the honest ones."]  # fmt: skip
    return _render_by_dataset(
        found, tables, "ablations_hybrid", lambda ds: _runs(found, "ablations_hybrid", ds), build, notes
    )


# ------------------------------------------------------------------------------------------------ figures
def _figure_index(
    found: Found,
    tables: Path,
    name: str,
    written: list[Path],
    extra: Sequence[str] = (),
    data: Sequence[pd.DataFrame] = (),
) -> list[Path]:
    """Beside each figure: a Markdown (where it is, what made it, what was missing) and its data as CSV."""
    lines = [f"# {TARGETS[name].title}", *[f"- `{p}`" for p in written if p.suffix == ".png"]]
    notes = [_lme_note(found), *_missing(found, TARGETS[name].experiments), *extra]
    runs = list({id(r): r for e in TARGETS[name].experiments for ds in _datasets(found) for r in _runs(found, e, ds)}
                .values())  # fmt: skip
    frame = (
        pd.concat([d for d in data if not d.empty], ignore_index=True)
        if any(not d.empty for d in data)
        else None
    )
    return _write("\n".join(lines) + "\n\n" + footer(runs, name, notes), frame, tables, name)


def _render_figure(
    found: Found,
    tables: Path,
    name: str,
    draw: Callable[[str], tuple[list[Path], pd.DataFrame] | None],
    extra: Sequence[str] = (),
) -> list[Path]:
    """A figure per dataset (``draw`` returns its files and data, or None where the dataset has no runs for it),
    then the index Markdown and the data of all of them."""
    written: list[Path] = []
    data: list[pd.DataFrame] = []
    for ds in _datasets(found):
        drawn = draw(ds)
        if drawn is not None:
            written, data = written + drawn[0], [*data, drawn[1]]
    return written + _figure_index(found, tables, name, written, extra, data=data)


@renders("fig3")
def render_fig3(found: Found, tables: Path, figures: Path) -> list[Path]:
    def draw(ds: str) -> tuple[list[Path], pd.DataFrame] | None:
        sweep, methods = _runs(found, "fig3", ds), _runs(found, "table1", ds)
        # an anchor point that is one of the methods' runs (the default k) is drawn once, as that method
        shown = {id(r) for r in methods}
        anchors = [r for r in _runs(found, "fig3_anchors", ds) if id(r) not in shown]
        if not (sweep or methods):
            return None
        return paper_figures.fig3(sweep, anchors, methods, figures / f"fig3{_suffix(ds)}", ds)

    return _render_figure(found, tables, "fig3", draw)


@renders("fig4")
def render_fig4(found: Found, tables: Path, figures: Path) -> list[Path]:
    def draw(ds: str) -> tuple[list[Path], pd.DataFrame] | None:
        theta, dsigma = _runs(found, "fig4_theta", ds), _runs(found, "fig4_dsigma", ds)
        if not (theta or dsigma):
            return None
        return paper_figures.fig4(theta, dsigma, figures / f"fig4{_suffix(ds)}", ds)

    return _render_figure(found, tables, "fig4", draw, [stats.describe()])


@renders("fig5")
def render_fig5(found: Found, tables: Path, figures: Path) -> list[Path]:
    def draw(ds: str) -> tuple[list[Path], pd.DataFrame] | None:
        surface = [r for r in _runs(found, "fig4_theta", ds) if r.consolidates]
        stage = _runs(found, "fig5", ds)
        if not (surface or stage):
            return None
        return paper_figures.fig5(surface, stage, figures / f"fig5{_suffix(ds)}", ds)

    return _render_figure(found, tables, "fig5", draw)


@renders("fig6")
def render_fig6(found: Found, tables: Path, figures: Path) -> list[Path]:
    def draw(ds: str) -> tuple[list[Path], pd.DataFrame] | None:
        runs = [r for r in _runs(found, "fig4_theta", ds) if r.consolidates]
        return paper_figures.fig6(runs, figures / f"fig6{_suffix(ds)}", ds) if runs else None

    return _render_figure(found, tables, "fig6", draw)


@renders("memgpt_window")
def render_memgpt_window(found: Found, tables: Path, figures: Path) -> list[Path]:
    """MemGPT's window sweep (allmem/report/tables/memgpt_window.py): the table and its figure, on the generated file."""
    name = "memgpt_window"
    sections, frames, drawn, runs_all = [f"# {TARGETS[name].title}"], [], [], []
    for ds in _datasets(found):
        runs = _runs(found, name, ds)
        if runs:
            t = window_view.compute(runs)
            frames.append(t.assign(dataset=ds))
            runs_all += runs
            sections += [f"## {window_view.TITLES.get(ds, ds)}", window_view.markdown_for(t)]
            drawn += window_view.figure(t, runs, figures / name)
    notes = ["Data: a synthetic file with LongMemEval-s's shape (benchmarks/lme_synth.py; `make memgpt_window` "
             "writes it, MGW_QUESTIONS haystacks of MGW_SESSIONS sessions), not the real LongMemEval-s.",
             *_missing(found, [name]), stats.describe("the smallest window") + ".",
             *window_view.DEFINITIONS]  # fmt: skip
    sections.append(footer(runs_all, name, notes))
    frame = pd.concat(frames, ignore_index=True) if frames else None
    return _write("\n\n".join(sections), frame, tables, name) + drawn


# Targets rendered with the LongMemEval file too (Table 5 reads the loaders and needs no run; Table 8 and Fig. 7
# name what is missing themselves): allmem/report/tables/table5.py, table8.py, fig7.py.
@renders("table5", lme=True)
def render_table5(found: Found, tables: Path, figures: Path, lme: str | None) -> list[Path]:
    return table5.render(tables, lme, LME_SKIPPED)


@renders("table8", lme=True)
def render_table8(found: Found, tables: Path, figures: Path, lme: str | None) -> list[Path]:
    return table8.render(found, tables, figures, lme, LME_SKIPPED)


@renders("fig7", lme=True)
def render_fig7(found: Found, tables: Path, figures: Path, lme: str | None) -> list[Path]:
    return fig7.render(found, tables, figures, lme, LME_SKIPPED)


def summarise(
    targets: Sequence[str], root: Path, out: Path, lme: str | None = None, extra: Sequence[str] = (),
    judge: str | None = None,
) -> list[Path]:  # fmt: skip
    """Write the tables and figures of ``targets`` (groups allowed) under ``out``; returns the files written.
    Refuses runs made by different code (``runs.check_same_code``)."""
    names = expand(targets)
    found = collect(experiments_of(names), root, lme, extra)
    used = [p.run for per in found.values() for pts in per.values() for p in pts if p.run is not None]
    if not used and any(
        TARGETS[n].experiments for n in names
    ):  # nothing to show is a failure, not an empty table
        raise ConfigError(
            f"no complete run under {root} for {', '.join(names)}; run them first (make {' '.join(names)})"
        )
    check_same_code(used)
    if (
        judge is not None
    ):  # the 4o-J column from another judge (allmem judge RUN_DIR ...): every run must have it
        found = {e: {d: [replace(p, run=None if p.run is None else with_judge(p.run, judge)) for p in pts]
                     for d, pts in per.items()} for e, per in found.items()}  # fmt: skip
    tables, figures = out / "tables", out / "figures"
    written: list[Path] = []
    if not lme and any(e not in ONLY_ON for e in experiments_of(names)):
        print(f"[allmem] {LME_SKIPPED}")
    for name in names:
        paths = (
            STANDALONE[name](found, tables, figures, lme)
            if name in STANDALONE
            else RENDER[name](found, tables, figures)
        )
        for p in paths:
            print(f"[allmem] {name}: {p}")
        written += paths
    runs = list({r.config_hash: r for per in found.values() for pts in per.values() for p in pts
                 if (r := p.run) is not None}.values())  # fmt: skip
    if runs:
        parquet, kept = write_parquet(runs, tables / "per_question.parquet")
        also = f" (and {kept} kept from an earlier step, same code)" if kept else ""
        print(f"[allmem] per-question records of {len(runs)} runs{also}: {parquet}")
        written.append(parquet)
    return written
