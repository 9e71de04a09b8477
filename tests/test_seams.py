"""The seams between packages, as a user meets them: one launcher CLI (``allmem paper``), one rule for where
relative paths and defaults point (W&B after sealing: tests/test_report_wandb.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.faultkit import env


def _cli(cwd: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "allmem.cli", *args], cwd=cwd, env=env(**extra), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def test_report_defaults_to_the_results_folder_allmem_run_writes(tmp_path: Path) -> None:
    """``allmem run`` puts runs under ``paths.results`` (``ALLMEM_RESULTS``, else the repository's ``results/``)
    whatever the current folder; ``allmem report`` looked in ``./results/runs/paper`` of the current folder."""
    results = tmp_path / "results-elsewhere"
    cwd = tmp_path / "somewhere"
    cwd.mkdir()
    res = _cli(cwd, "report", "table2", ALLMEM_RESULTS=str(results))
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert res.returncode == 1 and len(lines) == 1, res.stderr
    assert f"no complete run under {results / 'runs' / 'paper'} for table2" in lines[0]
    assert not (cwd / "results").exists()


def test_a_relative_runs_folder_is_relative_to_the_current_folder_for_every_command(tmp_path: Path) -> None:
    """``allmem report --runs rel`` and ``allmem paper --runs rel`` read ``<cwd>/rel``, as ``run.root=rel`` writes
    there (Hydra does not change directory)."""
    res = _cli(tmp_path, "report", "table2", "--runs", "rel", "--out", "out")
    assert res.returncode == 1 and "no complete run under rel for table2" in res.stderr, res.stderr
    res = _cli(tmp_path, "paper", "list", "table4", "--runs", "rel")
    assert res.returncode == 0, res.stderr
    rows = res.stdout.splitlines()
    assert rows and all(r.split()[-1] == "missing" for r in rows), res.stdout
    res = _cli(tmp_path, "paper", "run", "table4", "--runs", "rel", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert f"run.root={tmp_path / 'rel'}" in res.stdout
