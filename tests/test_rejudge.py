"""``allmem judge RUN_DIR``: a finished offline run judged afterwards against the local stub server, binary and
graded, then replayed; the run's own files stay byte-identical (allmem/run/rejudge.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from allmem import files
from allmem.errors import ConfigError
from allmem.report.items import item_frame
from allmem.report.runs import find_runs, load_run, with_judge
from allmem.report.tables import table1
from allmem.run.rejudge import JUDGES, VERDICTS, graded_block, judge_run, main
from tests.llm_stub import StubLLM, default_verdict, graded_verdict
from tests.runkit import compose_and_run

KEY = "ALLMEM_REJUDGE_KEY"


def _finished_run(tmp_path: Path) -> Path:
    return compose_and_run(tmp_path / "runs", "method=bm25", cache=tmp_path / "c")


def _snapshot(run_dir: Path) -> dict[str, str]:
    """sha256 of every file of the run but the judges' folder and the lock (which holds its holder's PID)."""
    return {
        p.relative_to(run_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.relative_to(run_dir).parts[0] not in (JUDGES, files.LOCK)
    }


def _openai(stub: StubLLM, *extra: str) -> list[str]:
    return ["llm=openai", f"llm.base_url={stub.base_url}", f"llm.api_key_env={KEY}", "llm.backoff_base_s=0.01",
            "llm.rpm=null", "llm.tpm=null", *extra]  # fmt: skip


def test_judge_again_writes_beside_the_run_and_changes_none_of_its_files(
    tmp_path: Path, stub: StubLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY, "sk-test")
    run_dir = _finished_run(tmp_path)
    before = _snapshot(run_dir)
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    assert all("judge" not in r for r in records)  # offline: never judged

    folder = judge_run(run_dir, _openai(stub, "llm.judge.model=judge-b"))
    assert _snapshot(run_dir) == before  # byte-identical
    assert folder.parent == run_dir / JUDGES and folder.name.startswith("judge-b-1v-")
    verdicts = files.read_jsonl(folder / VERDICTS)
    assert len(verdicts) == len(records)
    # 4o-J by hand: the stub says yes iff every gold word is in the prediction
    yes = sum(default_verdict(r["question"], r["gold"], r["prediction"]) for r in records)
    metrics = json.loads((folder / files.METRICS).read_text())
    assert metrics["overall"]["judge"] == pytest.approx(100 * yes / len(records))
    assert metrics["judge_identity"]["model"] == "judge-b" and (folder / files.DONE).exists()
    assert {c["model"] for c in files.read_jsonl(folder / files.CALLS)} == {"judge-b"}
    n_calls = stub.count

    assert [r.path for r in find_runs(tmp_path / "runs")] == [run_dir]  # a judge folder is no run
    # the tables pick the judge: Table 1's 4o-J is this judge's, the run's own stays n/a
    run = load_run(run_dir)
    assert item_frame(run)["judge"].isna().all()
    picked = table1.compute([with_judge(run, folder.name)], "locomo")
    row = picked[(picked["metric"] == "judge") & (picked["group"] == "overall") & (picked["subset"] == "all")]
    assert row["mean"].item() == pytest.approx(100 * yes / len(records))
    with pytest.raises(ConfigError, match="no finished judge"):
        with_judge(run, "nobody-1v-00000000")
    # a second call with the same judge finds every verdict made: no request
    assert judge_run(run_dir, _openai(stub, "llm.judge.model=judge-b")) == folder and stub.count == n_calls
    # replay from the response cache: the same folder, the same verdicts, no request
    for p in (folder / VERDICTS, folder / files.METRICS, folder / files.DONE):
        p.unlink()
    replayed = judge_run(run_dir, ["llm=replay", "llm.judge.model=judge-b"])
    assert replayed == folder and stub.count == n_calls
    assert [v["judge"]["verdict"] for v in files.read_jsonl(folder / VERDICTS)] == [
        v["judge"]["verdict"] for v in verdicts
    ]
    assert _snapshot(run_dir) == before


def test_graded_judge_strict_and_lenient_by_hand(
    tmp_path: Path, stub: StubLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY, "sk-test")
    run_dir = _finished_run(tmp_path)
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    folder = judge_run(run_dir, _openai(stub), graded=True)
    assert "-graded-" in folder.name
    grades = [graded_verdict(r["question"], r["gold"], r["prediction"]) for r in records]
    got = {
        (v["dialogue_id"], v["question_id"]): v["judge"]["grade"] for v in files.read_jsonl(folder / VERDICTS)
    }
    assert [got[(r["dialogue_id"], r["question_id"])] for r in records] == grades
    block = json.loads((folder / files.METRICS).read_text())["graded"]["overall"]
    n = len(grades)
    assert block["strict"] == pytest.approx(100 * grades.count("correct") / n)
    assert block["lenient"] == pytest.approx(100 * (grades.count("correct") + grades.count("partial")) / n)
    run = load_run(run_dir)
    text = table1.markdown_for(table1.compute([run], "locomo"), [run], "locomo")
    assert "### Graded verdicts beside 4o-J" in text
    assert f"| bm25 | n/a | {block['strict']:.2f} | {block['lenient']:.2f} |" in text


def test_graded_block_by_hand() -> None:
    block = graded_block(["correct", "partial", "wrong", "abstain", "invalid", None])
    # decided: 4 (invalid and missing left out); strict 1/4, lenient 2/4, abstain 1/4
    assert (block["strict"], block["lenient"], block["abstain_rate"]) == (25.0, 50.0, 25.0)
    assert block["counts"]["invalid"] == 1 and block["counts"]["missing"] == 1


def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="not a complete run"):
        judge_run(tmp_path, ["llm=openai"])
    assert main([str(tmp_path), "method=bm25"]) == 1
    assert "allmem judge: error:" in capsys.readouterr().err
