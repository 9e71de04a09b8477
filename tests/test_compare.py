"""The comparison rule (``allmem.run.compare.same_result``, ``allmem compare``): two runs of the same config are the
same result whatever their timings, cache state, attempts or process; a changed answer is a difference."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from allmem import files
from allmem.run import attempts, compare
from tests.faultkit import FIXTURES, Result, allmem_run, cli, done_dir

TINY = FIXTURES / "locomo_tiny.json"
pytestmark = pytest.mark.slow


def _compare(a: Path, b: Path) -> Result:
    return cli("compare", str(a), str(b), cwd=a.parent, timeout=120)


def _edit_predictions(run: Path, change) -> None:  # noqa: ANN001 - a callable on one record
    path = run / files.PREDICTIONS
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    change(lines[0])
    path.write_text("".join(json.dumps(x) + "\n" for x in reversed(lines)))  # order does not matter either


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny fixture run twice into two roots; the second shares the first's caches (cached replies)."""
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    args = ("method=allmem", f"dataset.path={TINY}")
    first = allmem_run(a, *args)
    second = allmem_run(b, *args, cache=a / "cache")
    return done_dir(first), done_dir(second)


def test_two_runs_of_one_config_are_the_same(two_runs: tuple[Path, Path]) -> None:
    a, b = two_runs
    assert compare.same_result(a, b) == []
    res = _compare(a.parents[1], b.parents[1])  # two run roots: matched by relative path
    assert res.rc == 0, res.out + res.err
    assert f"{a.relative_to(a.parents[1]).as_posix()}: same" in res.out


def test_changed_latency_is_the_same_result(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    copy = shutil.copytree(two_runs[0], tmp_path / "copy")
    _edit_predictions(copy, lambda r: r["latency_ms"].update(generate=12345.0))
    metrics = json.loads((copy / files.METRICS).read_text())
    metrics["wall_s_last_session"] = 999.0
    (copy / files.METRICS).write_text(json.dumps(metrics))
    res = _compare(two_runs[1], copy)
    assert res.rc == 0, res.out + res.err


def test_changed_prediction_differs(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    copy = shutil.copytree(two_runs[0], tmp_path / "copy")
    _edit_predictions(copy, lambda r: r.update(prediction="something else"))
    diffs = compare.same_result(two_runs[1], copy)
    assert len(diffs) == 1 and diffs[0].startswith("predictions.jsonl.conv-1/conv-1:q0000@end.prediction:")
    res = _compare(two_runs[1], copy)
    assert res.rc == 1
    assert "differs: predictions.jsonl.conv-1/conv-1:q0000@end.prediction" in res.out


def test_a_changed_torch_version_is_named_first(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    """Two runs that disagree and were made with different torch builds: ``allmem compare`` names the version
    first (the likely cause), and only once, before the answer that changed."""
    a, b = two_runs
    manifest = json.loads((a / files.MANIFEST).read_text())
    assert manifest["packages"]["torch"]  # recorded by the run itself
    assert set(attempts.NUMERIC_PACKAGES) <= set(manifest["packages"])  # transformers, onnxruntime included
    copy = shutil.copytree(a, tmp_path / "copy")
    for entry in (manifest, *manifest["attempts"]):
        entry["packages"]["torch"] = "9.9.9"
    (copy / files.MANIFEST).write_text(json.dumps(manifest))
    _edit_predictions(copy, lambda r: r.update(prediction="something else"))
    diffs = compare.same_result(b, copy)
    torch_now = json.loads((b / files.MANIFEST).read_text())["packages"]["torch"]
    assert (
        diffs[0] == f"manifest.json.packages: torch {torch_now} != 9.9.9 (a package that can change numbers)"
    )
    assert diffs[1].startswith("predictions.jsonl.conv-1/conv-1:q0000@end.prediction:")
    assert not any("torch" in d for d in diffs[1:])  # named once
    res = _compare(b, copy)
    assert res.rc == 1 and f"differs: manifest.json.packages: torch {torch_now} != 9.9.9" in res.out


def test_a_run_in_one_root_only_is_missing(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    res = _compare(two_runs[0].parents[1], tmp_path / "x")
    assert res.rc == 1 and ": missing" in res.out


def _rewrite(path: Path, change) -> None:  # noqa: ANN001 - a callable on the list of records
    path.write_text("".join(json.dumps(x) + "\n" for x in change(files.read_jsonl(path))))


def test_an_interrupted_attempts_unfinished_work_is_spent_not_a_result(
    two_runs: tuple[Path, Path], tmp_path: Path
):
    """A resumed run books the calls of the dialogue a killed attempt had begun (attempt 1) beside the calls of
    the attempt that ingested it again (attempt 2): the same result as the uninterrupted run, as ``run_cost``
    counts it. The same extra lines booked by the kept attempt are a difference."""
    resumed = shutil.copytree(two_runs[0], tmp_path / "resumed")
    for name in (files.PREDICTIONS, files.SYSTEM_STATS, files.CALLS):
        _rewrite(resumed / name, lambda recs: [{**r, "attempt": 2} for r in recs])
    writes = [r for r in files.read_jsonl(resumed / files.CALLS) if r["question_id"] is None]
    assert writes, "the fixture run books no ingestion call"
    abandoned = [{**r, "attempt": 1} for r in writes[:3]]
    _rewrite(resumed / files.CALLS, lambda recs: abandoned + recs)
    metrics = json.loads((resumed / files.METRICS).read_text())
    metrics["cost_all_attempts"]["all"]["calls"] += len(abandoned)
    (resumed / files.METRICS).write_text(json.dumps(metrics))
    assert compare.same_result(two_runs[1], resumed) == []

    kept_twice = shutil.copytree(resumed, tmp_path / "kept_twice")
    _rewrite(kept_twice / files.CALLS, lambda recs: [{**r, "attempt": 2} for r in recs])
    assert compare.same_result(two_runs[1], kept_twice) == ["calls.jsonl: 0 lines only in A, 3 only in B"]
