"""``allmem report``: tables and figures, read only from complete run directories.

allmem report table1 fig3 --runs results/runs/paper --out results   # paper targets (and groups: tables,
                                                                    # figures, paper); --lme PATH adds
                                                                    # LongMemEval-s
allmem report sweep --runs results/runs/sweeps/NAME --out results/sweeps/NAME   # any multirun
allmem report DIR [--out FILE] [--figures DIR]                      # overview of every run under DIR
allmem report llm --runs results/runs/llm --out results/llm          # what a real model did, per role (llm_roles)

Defaults are under the results folder (``ALLMEM_RESULTS``, else ``<repo>/results``), as for ``allmem run``; a
relative path given is relative to the current folder, as ``run.root=`` is.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from allmem.errors import ConfigError
from allmem.files import CONFIG, write_atomic
from allmem.paths import results_dir
from allmem.report.runs import check_same_code
from allmem.types import RecordError
from benchmarks import fit_split


def build_report(root: Path) -> str:
    from allmem.metrics.judge import invalid_note
    from allmem.report.tables import find_runs, group_table, main_table, split_table
    from allmem.report.tables.atc import atc_sections

    runs = find_runs(root)
    if not runs:
        raise SystemExit(f"allmem report: no complete run directory (with DONE) under {root}")
    check_same_code(runs)
    sections = []
    for dataset in sorted({r.dataset for r in runs}):
        subset = [r for r in runs if r.dataset == dataset]
        offline = all(r.offline for r in subset)
        label = " (offline backend: extractive answers, no LLM judge)" if offline else ""
        invalid = invalid_note(subset)  # allmem.metrics.judge: invalid verdicts counted, flagged above 2%
        sections.append(
            f"## {dataset}{label}\n\n{main_table(subset)}" + (f"\n\n*{invalid}*" if invalid else "")
        )
        sections.append(
            f"### F1 per {'category' if dataset == 'locomo' else 'question type'}\n\n{group_table(subset)}"
        )
        if dataset == "locomo":
            fit = fit_split("locomo")  # conv-26, 30, ...: the first id whole, the others by number
            ids = ", ".join([*fit[:1], *(i.removeprefix("conv-") for i in fit[1:])])
            sections.append(
                "### Fitted vs held-out conversations\n\nAny threshold fitted on LoCoMo was fitted on "
                f"{ids} only.\n\n{split_table(subset)}"
            )
        sections += atc_sections(subset)
    done = {r.path for r in runs}
    # a run folder's W&B sub-folder writes a config.yaml of its own
    found = {p.parent for p in root.rglob(CONFIG) if "wandb" not in p.relative_to(root).parts}
    incomplete = sorted(found - done)
    if incomplete:  # named, never silently left out
        sections.append(
            "Incomplete (no DONE; not counted):\n\n" + "\n".join(f"- incomplete: {p}" for p in incomplete)
        )
    return "\n\n".join(sections) + "\n"


def _overview(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="allmem report DIR", description="Overview of every run under DIR.")
    parser.add_argument("root", type=Path, help="folder holding run directories (searched recursively)")
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    parser.add_argument("--figures", type=Path, help="also draw the figures (PNG) into this folder")
    args = parser.parse_args(argv)
    text = build_report(args.root)
    print(text)
    if args.out:
        write_atomic(args.out, text)
    if args.figures:
        from allmem.report.figures import write_figures
        from allmem.report.tables import find_runs

        for path in write_figures(find_runs(args.root), args.figures):
            print(f"[allmem] figure: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Expected errors (a run folder that cannot be read as a run, a refused mix of runs) print one line."""
    try:
        return _main(list(argv or []))
    except (ConfigError, RecordError) as exc:  # RecordError: a run file that is not JSON, named
        print(f"allmem report: error: {exc}", file=sys.stderr)
        return 1


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "site":
        from allmem.report.site import main as site_main

        return site_main(argv[1:])
    if argv and argv[0] == "llm":
        return _llm_roles(argv[1:])
    if argv and Path(argv[0]).is_dir():
        return _overview(argv)
    from allmem.report.targets import ALIASES, GROUPS, TARGETS

    names = [*TARGETS, *ALIASES, *GROUPS, "sweep"]
    parser = argparse.ArgumentParser(prog="allmem report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("targets", nargs="+", help=f"one or more of: {', '.join(names)}; or a run folder")
    parser.add_argument("--runs", type=Path, default=results_dir() / "runs" / "paper",
                        help="run root (default <results>/runs/paper; relative: to the current folder)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=results_dir(),
                        help="writes <out>/tables and <out>/figures (default <results>)")  # fmt: skip
    parser.add_argument(
        "--lme", default=None, help="longmemeval_s_cleaned.json the runs used (adds LongMemEval-s)"
    )
    parser.add_argument(
        "--set", dest="extra", default="", help="the extra Hydra overrides the runs used, quoted"
    )
    parser.add_argument("--judge", default=None,
                        help="4o-J from the judge folder <run>/judges/<KEY> (allmem judge) instead of the runs' own")  # fmt: skip
    args = parser.parse_args(argv)
    if "sweep" in args.targets:
        from allmem.report.tables.sweep import summarise_sweep

        for path in summarise_sweep(args.runs, args.out):
            print(f"[allmem] sweep: {path}")
        rest = [t for t in args.targets if t != "sweep"]
        if not rest:
            return 0
        args.targets = rest
    from allmem.report.paper import summarise

    summarise(
        args.targets,
        args.runs,
        args.out,
        args.lme or None,
        shlex.split(args.extra),
        judge=args.judge,
    )
    return 0


def _llm_roles(argv: list[str]) -> int:
    from allmem.report.runs import find_runs
    from allmem.report.tables import llm_roles

    parser = argparse.ArgumentParser(prog="allmem report llm", description=llm_roles.__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=Path, required=True, help="the run root (make table1-llm: results/runs/llm)"
    )
    parser.add_argument("--out", type=Path, required=True, help="writes <out>/tables/llm_roles.md")
    args = parser.parse_args(argv)
    runs = find_runs(args.runs)
    if not runs:
        raise ConfigError(f"{args.runs}: no complete run directory")
    print(f"[allmem] llm roles: {llm_roles.write(runs, args.out)}")
    return 0
