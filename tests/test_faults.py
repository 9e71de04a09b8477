"""Issue 9's fault cases through the real CLI: each ends in a correct run or a clear one-line error, never in a
sealed run that looks valid and is not. LLM endpoints are local (127.0.0.1) stand-ins; the embedder is hashed
where the model is not the point, so most cases take seconds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from allmem import files
from allmem.llm.ledger import price_run
from tests.faultkit import FIXTURES, REPO, allmem_run, cli, common, done_dir, env, popen_run, run_dirs
from tests.llm_stub import StubLLM
from tests.runkit import compose

TINY = FIXTURES / "locomo_tiny.json"
N_TINY = sum(len(s["qa"]) for s in json.loads(TINY.read_text()))
KEY = "sk-faults-SECRET-7c1d"


def _openai(base_url: str, *extra: str) -> list[str]:
    """An openai run tuned to fail fast (no pacing, tiny backoff); ``extra`` may tighten it further."""
    return [
        "method=bm25", f"dataset.path={TINY}", "llm=openai", f"llm.base_url={base_url}", "llm.api_key_env=FAULTS_KEY",
        "llm.rpm=null", "llm.tpm=null", "llm.backoff_base_s=0.01", "llm.backoff_max_s=0.05", *extra,
    ]  # fmt: skip


def _keyed(**extra: str) -> dict[str, str]:
    return env(FAULTS_KEY=KEY, **extra)


def _assert_one_line_error(res, *needles: str) -> None:
    assert res.rc != 0
    assert "Traceback" not in res.err, res.err[-2000:]
    last = res.last_line()
    assert last.startswith("allmem run: error: "), res.err[-2000:]
    for needle in needles:
        assert needle in last, last


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ 1. unreachable, broken or hung endpoints


@pytest.mark.slow  # the CLI in a subprocess
def test_closed_port_fails_in_seconds_before_anything_is_created(tmp_path):
    t0 = time.monotonic()
    res = allmem_run(tmp_path, *_openai(f"http://127.0.0.1:{_closed_port()}/v1"), environ=_keyed())
    _assert_one_line_error(res, "cannot connect to http://127.0.0.1:", "refused")
    assert time.monotonic() - t0 < 60 and run_dirs(tmp_path) == []


@pytest.mark.slow  # the CLI in a subprocess
def test_a_base_url_that_is_no_url_is_named(tmp_path):
    res = allmem_run(tmp_path, *_openai("not-a-url"), environ=_keyed())
    _assert_one_line_error(res, "llm.base_url: 'not-a-url' is not an http(s) URL")
    assert run_dirs(tmp_path) == []


@pytest.mark.slow  # the CLI in a subprocess
def test_a_listener_that_never_answers_fails_at_the_probe(tmp_path):
    with socket.socket() as listener:  # the kernel accepts connections; nobody ever reads or writes
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        res = allmem_run(
            tmp_path, *_openai(url, "llm.timeout_s=1", "llm.connect_timeout_s=1"), environ=_keyed()
        )
    _assert_one_line_error(res, "accepted a connection but sent no answer within 1 s")
    assert run_dirs(tmp_path) == []


@pytest.mark.slow
def test_an_endpoint_that_hangs_on_chat_calls_trips_the_breaker(tmp_path):
    """Alive for the probe, then every chat call times out: a warning per retry, the breaker stops the run after
    two failed calls, the failed question is recorded with its error, nothing is sealed."""
    stub = StubLLM().start()
    stub.script(*[("delay", 2.0)] * 8)
    url = stub.base_url
    try:
        t0 = time.monotonic()
        res = allmem_run(
            tmp_path,
            # one question at a time: the first question's failed call is the first the breaker counts
            *_openai(
                url, "llm.timeout_s=0.3", "llm.max_retries=1", "llm.breaker_after=2", "llm.max_concurrency=1"
            ),
            environ=_keyed(),
        )
        elapsed = time.monotonic() - t0
    finally:
        stub.stop()
    _assert_one_line_error(
        res, "1 of 1 questions failed, then the run stopped early", url, "llm.breaker_after=2"
    )
    assert elapsed < 90
    retries = [line for line in res.err_lines if "retry 1 of 1" in line]
    assert len(retries) == 2 and all("Timeout" in line and "WARNING" in line for line in retries)
    (run_dir,) = run_dirs(tmp_path)
    assert not (run_dir / files.DONE).exists() and not (run_dir / files.METRICS).exists()
    (failed,) = files.read_jsonl(run_dir / files.PREDICTIONS)
    assert failed["prediction"] == "" and failed["error"].startswith("answer: transport: APITimeoutError")
    manifest = json.loads((run_dir / files.MANIFEST).read_text())
    assert manifest["attempts"][-1]["status"] == "stopped" and manifest["attempts"][-1]["failed"] == 1


@pytest.mark.slow
def test_failed_questions_are_recorded_not_sealed_and_a_rerun_retries_exactly_them(tmp_path):
    stub = StubLLM().start()
    stub.script(("status", 500))  # the first answer call fails (no retries allowed); everything else answers
    try:
        args = _openai(stub.base_url, "llm.max_retries=0")
        first = allmem_run(tmp_path, *args, environ=_keyed())
        _assert_one_line_error(first, f"1 of {N_TINY} questions failed", stub.base_url, "InternalServerError")
        assert "no DONE" in first.last_line() and "run the same command again" in first.last_line()
        (run_dir,) = run_dirs(tmp_path)
        records = files.read_jsonl(run_dir / files.PREDICTIONS)
        failed = [r for r in records if "error" in r]
        assert len(records) == N_TINY and len(failed) == 1 and "judge" not in failed[0]
        assert not (run_dir / files.DONE).exists()
        # the scorer and the report refuse it: a failed run never looks like a result
        score = cli("score", str(run_dir), cwd=tmp_path)
        assert score.rc == 2 and "failed" in score.err
        report = cli("report", str(tmp_path / "runs"), cwd=tmp_path)
        assert report.rc != 0 and "no complete run" in report.err

        n_before = stub.count
        second = allmem_run(tmp_path, *args, environ=_keyed())
        assert second.rc == 0, second.err[-2000:]
        assert done_dir(second) == run_dir
        assert stub.count - n_before == 2  # exactly the failed question: its answer and its judge call
    finally:
        stub.stop()
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    assert len(records) == N_TINY and not any("error" in r for r in records)
    assert len({r["question_id"] for r in records}) == N_TINY
    manifest = json.loads((run_dir / files.MANIFEST).read_text())
    assert [a["status"] for a in manifest["attempts"]] == ["failed", "complete"]
    assert manifest["attempts"][0]["failed_ids"] == [failed[0]["question_id"]]
    metrics = json.loads((run_dir / files.METRICS).read_text())
    assert metrics["run"]["attempts"] == 2 and metrics["overall"]["count"] == N_TINY
    # the failed attempt's calls stay in the ledger, under attempt 1, outside the run's cost
    calls = files.read_jsonl(run_dir / files.CALLS)
    assert [c["attempt"] for c in calls if c["error"]] == [1]
    assert metrics["cost"]["all"]["calls"] == 2 * N_TINY
    assert metrics["cost_all_attempts"]["all"]["calls"] == 2 * N_TINY + 1


# ------------------------------------------------------------------ 4. checked before anything is created


@pytest.mark.slow  # the CLI in a subprocess
def test_a_missing_key_fails_before_anything_is_created(tmp_path):
    stub = StubLLM().start()
    try:
        res = allmem_run(tmp_path, *_openai(stub.base_url), "method=allmem", environ=env())
    finally:
        stub.stop()
    _assert_one_line_error(res, "environment variable FAULTS_KEY is not set")
    assert run_dirs(tmp_path) == [] and stub.count == 0


@pytest.mark.slow  # the CLI in a subprocess
def test_a_key_pasted_into_api_key_env_is_refused_and_never_written(tmp_path):
    res = allmem_run(tmp_path, *_openai("http://127.0.0.1:9/v1"), f"llm.api_key_env={KEY}", environ=_keyed())
    _assert_one_line_error(res, "llm.api_key_env: must be the NAME of an environment variable")
    assert KEY not in res.err + res.out
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or KEY.encode() not in path.read_bytes(), path


@pytest.mark.slow  # the CLI in a subprocess
def test_replay_without_a_recorded_cache_fails_before_anything_is_created(tmp_path):
    base = ["method=allmem", f"dataset.path={TINY}", "llm=replay"]
    res = allmem_run(tmp_path, *base)
    _assert_one_line_error(res, "llm=replay: the response cache", "does not exist")
    empty = tmp_path / "cache" / "llm" / "responses.sqlite"
    empty.parent.mkdir(parents=True)
    with sqlite3.connect(empty) as conn:
        conn.execute("CREATE TABLE responses (key TEXT PRIMARY KEY)")
    res = allmem_run(tmp_path, *base)
    _assert_one_line_error(res, "holds no responses")
    assert run_dirs(tmp_path) == []


@pytest.mark.slow  # the CLI in a subprocess
@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("budget.tokens=-5", "budget.tokens: must be a non-negative integer, got -5"),
        ("+method.kk=5", "method: baselines.bm25.BM25: unknown argument(s) kk"),
        ("dataset.limit_questions=0", "no questions to ask"),
    ],
)
def test_bad_settings_fail_in_one_line_before_anything_is_created(tmp_path, override, needle):
    res = allmem_run(tmp_path, "method=bm25", f"dataset.path={TINY}", override)
    _assert_one_line_error(res, needle)
    assert run_dirs(tmp_path) == []


@pytest.mark.slow  # the CLI in a subprocess
def test_a_traceback_only_when_asked_for(tmp_path):
    res = allmem_run(tmp_path, "method=bm25", f"dataset.path={TINY}", "budget.tokens=-5",
                     environ=env(HYDRA_FULL_ERROR="1"))  # fmt: skip
    assert res.rc != 0 and "Traceback" in res.err and "ConfigError" in res.err


# ------------------------------------------------------------------ 2. one run per directory at a time


@pytest.mark.slow
def test_a_second_run_of_the_same_config_fails_at_once_and_a_killed_holder_never_blocks(tmp_path):
    stub = StubLLM().start()
    # The first chat call hangs for longer than the second run can take on a loaded machine, and the holder asks
    # one question at a time, so the holder writes nothing either while the second run tries (with concurrent
    # questions, or a 15 s hang under a full test suite, the holder's own records made that check a race).
    stub.script(("delay", 90.0))
    args = _openai(stub.base_url, "llm.timeout_s=120", "llm.max_concurrency=1")
    try:
        holder = popen_run(tmp_path, *args, environ=_keyed())
        lock = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and holder.poll() is None:
            locks = list((tmp_path / "runs").rglob(files.LOCK)) if (tmp_path / "runs").exists() else []
            if locks and locks[0].read_text().startswith(str(holder.pid)):
                lock = locks[0]
                break
            time.sleep(0.05)
        assert lock is not None, "the first run never took its lock"
        # The holder takes its lock before its first call: wait until that call hangs in the stub, or a third run
        # started before it would be the one to get the scripted delay (and wait it out).
        while time.monotonic() < deadline and holder.poll() is None and stub.count == 0:
            time.sleep(0.05)
        assert stub.count == 1, "the first run never made its hanging call"
        t0 = time.monotonic()
        second = allmem_run(tmp_path, *args, environ=_keyed())
        _assert_one_line_error(second, "is in use by another allmem run", f"PID {holder.pid}")
        assert time.monotonic() - t0 < 60
        assert files.read_jsonl(lock.parent / files.PREDICTIONS) == []  # the second appended nothing

        holder.send_signal(signal.SIGKILL)
        holder.wait()
        third = allmem_run(tmp_path, *args, environ=_keyed())  # the dead holder's lock does not block
        assert third.rc == 0, third.err[-2000:]
    finally:
        if holder.poll() is None:
            holder.kill()
        stub.stop()
    records = files.read_jsonl(lock.parent / files.PREDICTIONS)
    assert len(records) == len({r["question_id"] for r in records}) == N_TINY


# ------------------------------------------------------------------ 3. resume keeps every record true


def _strip(rows: list[dict], keys: tuple[str, ...]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in keys} for r in rows]


@pytest.mark.slow
def test_kill_and_resume_with_consolidation_keeps_every_record_true(tmp_path, locomo_path, request):
    """All-Mem with ATC on the first eight sessions of two LoCoMo conversations (some 170 turns and 30 questions
    each; 66 ATC events): SIGKILL mid-run, tear the ledger's and the events' last lines (as a full disk would),
    resume; everything equals an uninterrupted run's except what says when."""
    args = ["method=allmem", f"dataset.path={locomo_path}", "dataset.limit_dialogues=2", "dataset.limit_sessions=8",
            "dataset.limit_questions=30", "run.name=r"]  # fmt: skip
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    killed.mkdir()
    clean.mkdir()
    # the uninterrupted run, in a folder and caches of its own, beside the interrupted one (the second core)
    uninterrupted = popen_run(clean, *args)
    request.addfinalizer(lambda: (uninterrupted.kill(), uninterrupted.wait()))  # kill: a no-op once it ended
    proc = popen_run(killed, *args)
    preds = killed / "runs" / "r" / files.PREDICTIONS
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if preds.exists() and preds.read_text().count("\n") >= 35:  # inside the second dialogue
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    run_dir = preds.parent
    for name in (files.CALLS, files.EVENTS):
        with (run_dir / name).open("a") as fh:
            fh.write('{"phase": "write", "backend": "off')  # a torn line, no newline
    first_manifest = json.loads((run_dir / files.MANIFEST).read_text())["attempts"][0]

    resumed = allmem_run(killed, *args)
    assert resumed.rc == 0, resumed.err[-3000:]
    assert "cut a torn last line" in resumed.err
    assert uninterrupted.wait(timeout=600) == 0, uninterrupted.communicate()[1][-3000:]
    other = clean / "runs" / "r"

    def rows(d: Path, name: str) -> list[dict]:
        return files.read_jsonl(d / name)

    assert _strip(rows(run_dir, files.PREDICTIONS), ("latency_ms", "attempt")) == _strip(
        rows(other, files.PREDICTIONS), ("latency_ms", "attempt")
    )
    timing = ("latency_ms", "llm_latency_ms")
    assert _strip(rows(run_dir, files.EVENTS), timing) == _strip(rows(other, files.EVENTS), timing)
    assert [r["dialogue_id"] for r in rows(run_dir, files.SYSTEM_STATS)] == ["conv-26", "conv-30"]
    k_metrics = json.loads((run_dir / files.METRICS).read_text())
    c_metrics = json.loads((other / files.METRICS).read_text())
    for key in ("calls", "tokens_in", "tokens_out"):
        assert k_metrics["cost"]["all"][key] == c_metrics["cost"]["all"][key], key
    assert k_metrics["cost_all_attempts"]["all"]["calls"] > k_metrics["cost"]["all"]["calls"]
    assert k_metrics["run"]["attempts"] == 2
    attempts = json.loads((run_dir / files.MANIFEST).read_text())["attempts"]
    assert [a["status"] for a in attempts] == ["interrupted", "complete"]
    assert attempts[0]["started_at"] == first_manifest["started_at"] and attempts[0]["git"]["sha"]
    assert attempts[0]["data_digest"] == attempts[1]["data_digest"]
    calls = files.read_jsonl(run_dir / files.CALLS)  # every line whole again; pricing works
    assert {c["attempt"] for c in calls} == {1, 2}
    assert price_run(run_dir)["usd"] == 0.0


# ------------------------------------------------------------------ 5, 6. input that stalls, crashes or is empty


def _tiny_with(edit) -> list[dict]:
    raw = json.loads(TINY.read_text())
    edit(raw)
    return raw


@pytest.mark.slow  # the CLI in a subprocess
def test_a_lone_surrogate_is_rejected_by_the_loader_with_file_sample_and_field(tmp_path):
    raw = _tiny_with(lambda r: r[0]["conversation"]["session_1"][0].update(text="PLACEHOLDER"))
    bad = tmp_path / "surrogate.json"
    bad.write_text(json.dumps(raw).replace("PLACEHOLDER", "hi \\ud83d there"))
    res = allmem_run(tmp_path, "method=allmem", f"dataset.path={bad}")
    _assert_one_line_error(
        res, "surrogate.json: sample conv-1: field 'conversation.session_1[0].text'", "surrogate"
    )
    assert run_dirs(tmp_path) == []


@pytest.mark.slow
def test_a_one_megabyte_turn_ingests(tmp_path):
    words = "Caroline went to the Pottery class on Friday with Melanie and 3 friends from the support group".split()
    text = " ".join(words[i % len(words)] for i in range(180_000)) + "."
    raw = _tiny_with(lambda r: r[0]["conversation"]["session_1"][1].update(text=text))
    big = tmp_path / "big.json"
    big.write_text(json.dumps(raw[:1]))
    assert len(text) > 1_000_000
    res = allmem_run(tmp_path, "method=allmem_noatc", f"dataset.path={big}", timeout=240)
    assert res.rc == 0, res.err[-2000:]
    stats = files.read_jsonl(done_dir(res) / files.SYSTEM_STATS)
    assert stats[0]["turns"] == 11


@pytest.mark.slow  # the CLI in a subprocess
def test_empty_inputs_are_errors_not_complete_runs(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    res = allmem_run(tmp_path, "method=bm25", f"dataset.path={empty}")
    _assert_one_line_error(res, "no dialogues to run")
    no_questions = tmp_path / "no_questions.json"
    no_questions.write_text(json.dumps(_tiny_with(lambda r: [s.update(qa=[]) for s in r])))
    res = allmem_run(tmp_path, "method=bm25", f"dataset.path={no_questions}")
    _assert_one_line_error(res, "no questions to ask")
    assert run_dirs(tmp_path) == []


@pytest.mark.slow
def test_degenerate_items_are_counted_and_warned_about(tmp_path):
    def edit(raw: list[dict]) -> None:
        conv = raw[0]["conversation"]
        conv["session_1"][0]["text"] = ""  # one empty turn (no caption)
        raw[0]["qa"][0]["question"] = " "  # one empty question
        raw[0]["qa"][1]["evidence"] = ["D99:1"]  # evidence that names no turn
        raw[0]["qa"][2]["evidence"] = []  # no evidence

    data = tmp_path / "odd.json"
    data.write_text(json.dumps(_tiny_with(edit)))
    res = allmem_run(tmp_path, "method=bm25", f"dataset.path={data}")
    assert res.rc == 0, res.err[-2000:]
    warnings = [line for line in res.err_lines if "WARNING" in line]
    for needle in ("1 empty turns", "1 empty questions", "1 questions without evidence"):
        assert any(needle in line for line in warnings), (needle, warnings)
    inputs = json.loads((done_dir(res) / files.METRICS).read_text())["inputs"]
    assert inputs["empty_turns"] == 1 and inputs["empty_questions"] == 1
    assert inputs["questions_without_evidence"] == 1 and inputs["questions"] == N_TINY
    assert inputs["questions_with_unmatched_evidence"] >= 1


# ------------------------------------------------------------------ 7. small but real


@pytest.mark.slow
def test_run_files_honour_the_umask(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "allmem.cli", "run", *common(tmp_path), "method=bm25", f"dataset.path={TINY}"],
        cwd=tmp_path, env=env(), capture_output=True, text=True, preexec_fn=lambda: os.umask(0o002),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run_dir,) = run_dirs(tmp_path)
    for name in (files.CONFIG, files.MANIFEST, files.METRICS, files.PREDICTIONS, files.DONE):
        assert stat.S_IMODE((run_dir / name).stat().st_mode) == 0o664, name


def test_results_and_caches_resolve_against_the_repository_not_the_current_directory(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    import allmem.paths  # noqa: F401 - registers the resolver, as the CLI does

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ALLMEM_CACHE", raising=False)
    monkeypatch.delenv("ALLMEM_RESULTS", raising=False)  # the suite points it at a temporary folder
    cfg = compose(hydra=True)
    assert OmegaConf.select(cfg, "run.root") == str(REPO / "results" / "runs")
    assert OmegaConf.select(cfg, "paths.cache_dir") == str(REPO / ".cache")
    assert str(OmegaConf.select(cfg, "hydra.run.dir")).startswith(str(REPO / "results" / ".hydra"))
