"""The runner and run directory end to end: files written, rerun skipped, kill-and-resume, score == metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from allmem import rundir
from allmem.metrics import score_file
from allmem.runner import NOT_MENTIONED, run, two_options
from allmem.types import Question

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
ALLMEM = [sys.executable, "-m", "allmem.cli"]


def _cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def _common(tmp: Path, cache: Path) -> list[str]:
    return [
        f"run.root={tmp}",
        f"paths.cache_dir={cache}",
        "embedder=hash",  # the run contract does not depend on the model; the real one is for slow tests
        "run.progress=false",
    ]


def _strip_latency(records: list[dict]) -> list[dict]:
    """Latencies are measurements and differ between any two runs; every other field must be identical."""
    return [{k: v for k, v in r.items() if k != "latency_ms"} for r in records]


def test_tiny_run_writes_the_contract_and_reruns_skip(tmp_path, cache_dir, fixtures_dir):
    tiny = fixtures_dir / "locomo_tiny.json"
    cfg = _cfg(["method=bm25", f"dataset.path={tiny}", *_common(tmp_path, cache_dir)])
    run_dir = run(cfg)
    for name in (rundir.CONFIG, rundir.PREDICTIONS, rundir.METRICS, rundir.MANIFEST, rundir.DONE):
        assert (run_dir / name).exists(), name

    records = rundir.read_jsonl(run_dir / rundir.PREDICTIONS)
    raw = json.loads(tiny.read_text())
    assert len(records) == sum(len(s["qa"]) for s in raw)
    assert len({r["question_id"] for r in records}) == len(records)
    for r in records:
        assert r["context_tokens"] <= cfg.budget.tokens
        assert {"retrieve", "generate"} <= set(r["latency_ms"])

    manifest = json.loads((run_dir / rundir.MANIFEST).read_text())
    assert manifest["backend"]["offline"] is True
    assert str(tiny) in manifest["data"]

    # `allmem score` on the run's predictions reproduces the run's metrics exactly.
    metrics = json.loads((run_dir / rundir.METRICS).read_text())
    rescored = score_file(run_dir / rundir.PREDICTIONS, "allmem")
    assert rescored == {k: metrics[k] for k in rescored}
    assert metrics["overall"]["judge"] is None  # offline: no LLM judged, so no 4o-J
    assert "offline" in metrics["overall"]["judge_reason"]

    # A complete run is skipped: nothing is rewritten.
    before = (run_dir / rundir.PREDICTIONS).stat().st_mtime_ns
    assert run(cfg) == run_dir
    assert (run_dir / rundir.PREDICTIONS).stat().st_mtime_ns == before


def test_score_command_prints_the_metrics(tmp_path, cache_dir, fixtures_dir):
    tiny = fixtures_dir / "locomo_tiny.json"
    run_dir = run(_cfg(["method=full_history", f"dataset.path={tiny}", *_common(tmp_path, cache_dir)]))
    out = subprocess.run(
        [*ALLMEM, "score", str(run_dir / rundir.PREDICTIONS), "--protocol", "allmem"],
        capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    printed = json.loads(out.stdout)
    metrics = json.loads((run_dir / rundir.METRICS).read_text())
    assert printed == {k: metrics[k] for k in printed}


def test_kill_and_resume_equals_uninterrupted(tmp_path, cache_dir, locomo_path):
    """SIGKILL a real run mid-way; rerunning completes it with the same predictions, no duplicates, no gaps."""
    common = [f"paths.cache_dir={cache_dir}", f"embedder.cache_dir={cache_dir / 'embeddings'}", "run.progress=false",
              "method=bm25", f"dataset.path={locomo_path}", "dataset.limit_dialogues=1"]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    killed_root, clean_root = tmp_path / "killed", tmp_path / "clean"
    proc = subprocess.Popen(
        [*ALLMEM, "run", f"run.root={killed_root}", "run.name=r", *common], cwd=REPO, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    preds = killed_root / "r" / rundir.PREDICTIONS
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if preds.exists() and preds.read_text().count("\n") >= 5:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    n_before = preds.read_text().count("\n")
    assert not (killed_root / "r" / rundir.DONE).exists()

    subprocess.run([*ALLMEM, "run", f"run.root={killed_root}", "run.name=r", *common], cwd=REPO, env=env,
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run([*ALLMEM, "run", f"run.root={clean_root}", "run.name=r", *common], cwd=REPO, env=env,
                   check=True, capture_output=True)  # fmt: skip
    resumed = rundir.read_jsonl(preds)
    clean = rundir.read_jsonl(clean_root / "r" / rundir.PREDICTIONS)
    assert n_before < len(clean)
    assert _strip_latency(resumed) == _strip_latency(clean)


def test_torn_last_line_is_cut_before_appending(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"question_id": "a"}\n{"question_id": "b", "predi')
    assert [r["question_id"] for r in rundir.read_jsonl(path)] == ["a"]
    with rundir.JsonlWriter(path) as out:
        out.write({"question_id": "b"})
    assert [r["question_id"] for r in rundir.read_jsonl(path)] == ["a", "b"]


def test_changed_config_refuses_to_resume(tmp_path, cache_dir, fixtures_dir):
    tiny = fixtures_dir / "locomo_tiny.json"
    base = ["method=bm25", f"dataset.path={tiny}", "run.name=same", *_common(tmp_path, cache_dir)]
    rundir.prepare(tmp_path / "same", _cfg(base))
    with pytest.raises(RuntimeError, match="different config"):
        rundir.prepare(tmp_path / "same", _cfg([*base, "budget.tokens=100"]))


def test_two_options_is_seeded_and_holds_the_gold():
    q = Question(id="conv-1:q0001", dialogue_id="conv-1", text="?", gold="blue", evidence=(), category=5)
    opts = two_options(q, seed=0)
    assert sorted(opts) == sorted([NOT_MENTIONED, "blue"])
    assert two_options(q, seed=0) == opts
    q4 = Question(id="x", dialogue_id="conv-1", text="?", gold="blue", evidence=(), category=4)
    assert two_options(q4, seed=0) == ()
    # Over many ids both orders occur (the shuffle is real, not a constant order).
    orders = {two_options(Question(id=f"q{i}", dialogue_id="d", text="?", gold="g", evidence=(), category=5), 0)
              for i in range(20)}  # fmt: skip
    assert len(orders) == 2


def test_multirun_and_report(tmp_path, cache_dir, fixtures_dir):
    tiny = fixtures_dir / "locomo_tiny.json"
    subprocess.run(
        [*ALLMEM, "run", "-m", "method=bm25,full_history", f"dataset.path={tiny}", *_common(tmp_path, cache_dir)],
        cwd=REPO, check=True, capture_output=True,
    )  # fmt: skip
    done = sorted(p.parent.name.split("-")[0] for p in tmp_path.rglob(rundir.DONE))
    assert done == ["bm25", "full_history"]
    out = subprocess.run(
        [*ALLMEM, "report", str(tmp_path)], cwd=REPO, check=True, capture_output=True, text=True
    )
    assert "| bm25 |" in out.stdout and "| full_history |" in out.stdout
    assert "offline" in out.stdout


def test_longmemeval_tiny_with_allmem(tmp_path, cache_dir, fixtures_dir):
    """One memory per question, session-level evidence; All-Mem with consolidation on runs through."""
    tiny = fixtures_dir / "longmemeval_s_tiny.json"
    cfg = _cfg(
        ["dataset=longmemeval_s", f"dataset.path={tiny}", "method=allmem", *_common(tmp_path, cache_dir)]
    )
    run_dir = run(cfg)
    records = rundir.read_jsonl(run_dir / rundir.PREDICTIONS)
    raw = json.loads(tiny.read_text())
    assert [r["question_id"] for r in records] == [q["question_id"] for q in raw]
    for r, q in zip(records, raw, strict=True):
        assert r["dialogue_id"] == q["question_id"]  # its own haystack
        assert r["question_type"] == q["question_type"]
        assert set(r["ranked_source_ids"]) <= set(
            q["haystack_session_ids"]
        )  # sessions are the retrieval unit
        assert {"embed", "stage1", "stage2", "stage3"} <= set(r["latency_ms"])
    metrics = json.loads((run_dir / rundir.METRICS).read_text())
    assert set(metrics["groups"]) == {q["question_type"] for q in raw}
    stats = rundir.read_jsonl(run_dir / rundir.SYSTEM_STATS)
    assert len(stats) == len(raw) and all("atc" in s for s in stats)


def test_malformed_dataset_fails_before_a_run_directory_exists(tmp_path, cache_dir, fixtures_dir):
    from benchmarks import DatasetError

    bad = fixtures_dir / "malformed" / "locomo_bad_category.json"
    with pytest.raises(DatasetError, match="locomo_bad_category.json.*qa\\[1\\].category"):
        run(_cfg(["method=bm25", f"dataset.path={bad}", *_common(tmp_path, cache_dir)]))
    assert not any(tmp_path.rglob(rundir.CONFIG))
