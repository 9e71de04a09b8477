"""A system living outside the repository joins every target through one option, ``ALLMEM_CONFIG_PATH``
(docs/LIBRARY.md): ``make table1`` (launcher and summarise step) and ``make sweep`` on the debug fixture show the
example system (examples/my_memory) beside the repository's methods, and the checkout's ``git status`` is what it
was before."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from allmem.report import targets

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "my_memory" / "configs"


def _status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO, check=True,
                          capture_output=True, text=True).stdout  # fmt: skip


def _make(*args: str, tmp: Path) -> str:
    env = dict(
        os.environ, ALLMEM_CONFIG_PATH=str(EXAMPLE), PYTHONPATH=str(REPO)
    )  # the user's package importable
    # -o: the install stamp counts as up to date (a test never reinstalls the environment)
    proc = subprocess.run(["make", "-o", ".venv/.installed", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow  # every method of the table1 experiment on the fixture, in subprocesses
@pytest.mark.skipif(shutil.which("make") is None or shutil.which("git") is None, reason="needs make and git")
def test_example_system_in_table1_and_a_sweep_with_a_clean_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from report_fixture import write_experiment

    before = _status()
    out = tmp_path / "out"
    # the Stage-1 variants' experiments are complete already (runs written by hand, under the config hashes the
    # launcher looks for): the launcher skips them and runs table1's methods, the example's among them
    monkeypatch.setenv("ALLMEM_CONFIG_PATH", str(EXAMPLE))
    for experiment in targets.STAGE1_VARIANTS:
        assert write_experiment(
            tmp_path / "runs", experiment, lambda label, i: True, extra=["+debug=default"]
        )
    made = _make(
        "table1", f"RUNS={tmp_path / 'runs'}", f"OUT={out}", "SET=+debug=default", "JOBS=1", tmp=tmp_path
    )
    assert all(f"{e} on locomo: 1/1 runs complete, nothing to run" in made for e in targets.STAGE1_VARIANTS)
    table = (out / "tables" / "table1.md").read_text()
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")]
    assert "my_memory" in rows and "naive_rag" in rows and "allmem" in rows
    assert "Missing" not in table  # every point, the example's included, has its run
    _make("sweep", "NAME=mine", f"SWEEPS={tmp_path / 'sweeps'}", f"OUT={out}",
          "ARGS=method=my_memory,bm25 method.k=5 +debug=default", tmp=tmp_path)  # fmt: skip
    sweep = (out / "sweeps" / "mine" / "tables" / "sweep.md").read_text()
    assert "my_memory" in sweep and "bm25" in sweep
    assert _status() == before


def test_the_user_methods_join_the_compared_experiment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    repository = targets.sweep_points("table1")
    monkeypatch.setenv("ALLMEM_CONFIG_PATH", str(EXAMPLE))
    assert targets.user_methods() == ("my_memory",)
    assert targets.sweep_points("table1") == (*repository, ("method=my_memory",))
    listed = ",".join(p[0].split("=")[1] for p in repository)
    assert targets.launch_overrides("table1") == [f"method={listed},my_memory"]
    assert targets.launch_overrides("fig3") == []


def test_a_missing_folder_or_a_clashing_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALLMEM_CONFIG_PATH", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="ALLMEM_CONFIG_PATH.*not a folder"):
        targets.user_methods()
    (tmp_path / "method").mkdir()
    (tmp_path / "method" / "bm25.yaml").write_text("_target_: x.Y\nname: bm25\n")
    monkeypatch.setenv("ALLMEM_CONFIG_PATH", str(tmp_path))
    with pytest.raises(SystemExit, match="bm25.yaml: a repository method has this name too"):
        targets.user_methods()


def test_library_code_builds_the_user_method_without_hydra(monkeypatch: pytest.MonkeyPatch) -> None:
    from allmem.library import build_method
    from examples.my_memory.system import WordOverlap

    monkeypatch.setenv("ALLMEM_CONFIG_PATH", str(EXAMPLE))
    system = build_method("my_memory", k=7)
    assert isinstance(system, WordOverlap) and system.k == 7
