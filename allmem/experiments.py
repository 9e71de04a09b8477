"""``allmem paper run|list TARGET...``: launch (or list) the experiments a paper table or figure needs: one Hydra
multirun (``allmem run -m``) per experiment and dataset not complete, as ``allmem.report.targets`` (read only)
finds them. ``allmem report TARGET`` summarises afterwards; ``make <target>`` does both."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from allmem.errors import ConfigError
from allmem.fingerprint import source_fingerprint
from allmem.paths import results_dir
from allmem.report import targets
from allmem.report.runs import Run, by_hash, check_same_code


def run_experiments(
    names: Sequence[str],
    root: Path,
    jobs: int,
    lme: str | None,
    extra: Sequence[str],
    dry_run: bool = False,
) -> int:
    """Launch one Hydra multirun per experiment and dataset whose points are not all complete. A complete run
    made by other code than this checkout's (``allmem.fingerprint``) is never reused: refused in one line
    (docs/DESIGN.md)."""
    if not lme and any(e not in targets.ONLY_ON for e in targets.experiments_of(names)):
        print(f"[allmem] {targets.LME_SKIPPED}")
    env = dict(os.environ)
    if jobs > 1 and not env.get("OMP_NUM_THREADS"):  # one torch thread per parallel job, unless set
        env["OMP_NUM_THREADS"] = "1"
    runs: dict[str, Run] | None = None  # complete runs, read again after a multirun made some
    for exp in targets.experiments_of(names):
        if runs is None:
            runs = by_hash(targets.find_runs(root))
        for ds, pts in targets.collect([exp], root, lme, extra, runs)[exp].items():
            try:
                check_same_code([p.run for p in pts if p.run], source_fingerprint())
            except ConfigError as exc:
                print(f"[allmem] {exp} on {ds}: error: {exc}", file=sys.stderr)
                return 1
            done = sum(p.run is not None for p in pts)
            if done == len(pts):
                print(f"[allmem] {exp} on {ds}: {done}/{len(pts)} runs complete, nothing to run")
                continue
            cmd = [
                sys.executable, "-m", "allmem.cli", "run", "-m", f"+experiment={exp}",
                *targets.dataset_overrides(lme, exp)[ds], f"run.root={root}", "hydra/launcher=local",
                f"hydra.launcher.n_jobs={jobs}", *targets.launch_overrides(exp), *extra,
            ]  # fmt: skip
            print(
                f"[allmem] {exp} on {ds}: {done}/{len(pts)} complete; running:\n  {shlex.join(cmd[2:])}",
                flush=True,
            )
            if dry_run:
                continue
            rc = subprocess.call(cmd, env=env)
            runs = None
            if rc != 0:
                print(f"[allmem] {exp} on {ds}: the multirun failed (exit {rc})", file=sys.stderr)
                return rc
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    names = [*targets.TARGETS, *targets.ALIASES, *targets.GROUPS]
    parser = argparse.ArgumentParser(
        prog="allmem paper",
        description="Run the experiments of paper targets (Hydra multiruns), or list them.",
    )
    parser.add_argument("action", choices=("run", "list"))
    parser.add_argument("targets", nargs="+", help=f"targets or groups: {', '.join(names)}")
    parser.add_argument("--runs", type=Path, default=results_dir() / "runs" / "paper",
                        help="run root (default <results>/runs/paper; relative: to the current folder)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=2, help="parallel jobs (joblib launcher)")
    parser.add_argument("--lme", default=None, help="path to longmemeval_s_cleaned.json (optional)")
    parser.add_argument("--set", dest="extra", default="", help="extra Hydra overrides for every run, quoted")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    extra = shlex.split(args.extra)
    root = args.runs.expanduser().resolve()  # the same folder for this process and the multiruns it starts
    if args.action == "list":
        for exp, per_ds in targets.collect(
            targets.experiments_of(args.targets), root, args.lme or None, extra
        ).items():
            for ds, pts in per_ds.items():
                for p in pts:
                    state = p.run.path if p.run else "missing"
                    print(f"{exp:14s} {ds:14s} {p.label:40s} {p.config_hash} {state}")
        return 0
    return run_experiments(args.targets, root, args.jobs, args.lme or None, extra, args.dry_run)
