"""How the LLM layer fails: a 200 without an answer is a failed call, undecodable replies are retried or fail the
question, every try and every call has a wall-clock limit, Retry-After dates count, pacing waits are announced,
bad pacing settings and damaged response caches stop the run in one line naming the field or the file.
The endpoint is a local stub (tests/llm_stub.py) speaking HTTP on 127.0.0.1; nothing else is reached.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest

from allmem import files
from allmem.files import read_jsonl
from allmem.llm import LLMError, build_llm, validate_llm_config
from allmem.llm.cache import CachedReply, ResponseCache
from allmem.llm.limiter import RateLimiter
from allmem.llm.prompts import build_request
from tests.faultkit import FIXTURES, allmem_run, cli, done_dir, env, run_dirs
from tests.llm_stub import StubLLM

KEY = "sk-trust-SECRET-5e2b"
TINY = FIXTURES / "locomo_tiny.json"
N_TINY = sum(len(s["qa"]) for s in json.loads(TINY.read_text()))
HTML = (502, "text/html", b"<html><body><h1>502 Bad Gateway</h1></body></html>")


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRUST_KEY", KEY)


def make(stub: StubLLM, tmp_path: Path, **over):  # noqa: ANN201 - returns allmem.llm.LLM
    cfg = {
        "_target_": "allmem.llm.openai_backend.OpenAIBackend", "backend": "openai", "model": "gpt-4o-mini", "base_url": stub.base_url, "api_key_env": "TRUST_KEY",
        "timeout_s": 10, "max_retries": 2, "backoff_base_s": 0.01, "backoff_max_s": 0.05, "max_concurrency": 1,
        "rpm": None, "tpm": None, "breaker_after": 0, "cache": {"enabled": True, "path": "responses.sqlite"},
    } | over  # fmt: skip
    return build_llm(cfg, run_dir=tmp_path / "run", cache_dir=tmp_path / "cache")


def ask(llm, question: str = "Where did Caroline go?"):  # noqa: ANN001, ANN201
    return llm.chat(
        build_request("judge_allmem_default", {"question": question, "gold": "x", "response": "x"})
    )


# ------------------------------------------------------------------ empty and undecodable 200s


@pytest.mark.parametrize(
    ("action", "needle"),
    [
        (("choices", []), "no choices"),
        (("choices", [{"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "stop"}]),
         "content null"),
        (("content", ""), "content ''"),
        (("body", (200, "application/json", b"")), "empty reply body"),
        (("body", (200, "application/json", b"{not json")), "reply is not JSON"),
        (("body", (200, "text/html", HTML[2])), "reply is not JSON (text/html"),
        (("content", "caf\ud800"), "lone surrogate"),
        (("body", HTML), "InternalServerError: Error code: 502 (after 2 retries)"),
    ],
)  # fmt: skip
def test_a_200_without_a_usable_answer_fails_the_call_and_is_never_cached(stub, tmp_path, action, needle):
    """Each bad 200 fails every try (max_retries=2: three tries), is booked failed, leaves the cache empty."""
    llm = make(stub, tmp_path)
    stub.script(action, action, action)
    res = ask(llm)
    assert res.error is not None and needle in res.error and res.text == "" and not res.ok
    assert stub.count == 3
    (call,) = read_jsonl(tmp_path / "run" / "calls.jsonl")
    assert call["ok"] is False and call["retries"] == 2
    assert len(llm.cache) == 0
    again = ask(llm)  # the stub answers normally now: a live call, not a cached empty answer
    assert again.ok and not again.cached and again.text == "Stub reasoning. [[yes]]" and stub.count == 4
    llm.close()


def test_a_bad_200_then_a_good_one_is_a_retry_not_a_failure(stub, tmp_path):
    llm = make(stub, tmp_path)
    stub.script(("body", HTML), ("choices", []))
    res = ask(llm)
    assert res.ok and res.text == "Stub reasoning. [[yes]]" and stub.count == 3
    (call,) = read_jsonl(tmp_path / "run" / "calls.jsonl")
    assert call["ok"] is True and call["retries"] == 2
    llm.close()


def test_a_content_filter_refusal_is_not_asked_again(stub, tmp_path):
    refused = [
        {"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "content_filter"}
    ]
    llm = make(stub, tmp_path)
    stub.script(("choices", refused))
    res = ask(llm)
    assert res.error is not None and "content_filter" in res.error and stub.count == 1
    llm.close()


def test_empty_replies_count_towards_the_breaker(stub, tmp_path):
    from allmem.llm import CircuitOpen

    llm = make(stub, tmp_path, max_retries=0, breaker_after=2)
    stub.script(("choices", []), ("choices", []))
    assert ask(llm, "one").error is not None
    with pytest.raises(CircuitOpen, match="no choices"):
        ask(llm, "two")
    llm.close()


def test_an_empty_answer_cached_by_an_older_version_is_not_served(stub, tmp_path):
    llm = make(stub, tmp_path)
    req = build_request("judge_allmem_default", {"question": "q", "gold": "x", "response": "x"})
    model, params = llm.params_for(req)
    from allmem.llm.cache import cache_key

    key = cache_key(backend="openai", model=model, messages=req.messages, params=params, template=req.template,
                    template_version=req.template_version)  # fmt: skip
    with sqlite3.connect(tmp_path / "cache" / "responses.sqlite") as conn:  # as the old code stored it
        conn.execute("INSERT INTO responses VALUES (?,?,?,?,?,?,?,?,?)",
                     (key, "judge", req.template, "openai", model, "", 5, 0, 0.0))  # fmt: skip
    res = llm.chat(req)
    assert res.ok and not res.cached and res.text == "Stub reasoning. [[yes]]" and stub.count == 1
    assert llm.cache.get(key, "judge") == CachedReply(
        "Stub reasoning. [[yes]]", res.tokens_in, res.tokens_out
    )
    llm.close()


# ------------------------------------------------------------------ deadlines


def test_a_trickling_reply_is_cut_at_the_try_limit_and_the_call_at_its_total(stub, tmp_path, caplog):
    """A body arriving one byte per 0.3 s (it would take minutes): each try stops after 1 s, the call after
    2.5 s in all (the last try gets only the time left); the read timeout (10 s) alone would never fire."""
    llm = make(stub, tmp_path, try_timeout_s=1.0, call_timeout_s=2.5, max_retries=5)
    stub.script(*[("trickle", (0.3, 40))] * 6)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="allmem.llm"):
        res = ask(llm)
    elapsed = time.monotonic() - t0
    assert res.error is not None and res.error.endswith("(call limit 2.5 s reached)")
    retried = [r.getMessage() for r in caplog.records]
    assert retried and all("no complete reply within 1 s (llm.try_timeout_s)" in m for m in retried)
    assert 2.0 < elapsed < 5.0, elapsed
    assert 2 <= stub.count <= 4
    llm.close()


def test_retry_after_as_an_http_date_is_honoured(stub, tmp_path):
    """A 429 saying "retry at now + 2 s" as an HTTP-date: the retry waits about that long (the jittered backoff
    alone would be under 0.05 s)."""
    llm = make(stub, tmp_path, backoff_max_s=10)
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=2), usegmt=True)
    stub.script(("retry_after", (429, when)))
    t0 = time.monotonic()
    res = ask(llm)
    assert res.ok and stub.count == 2
    assert 0.9 < time.monotonic() - t0 < 5  # HTTP-dates have whole seconds: between 1 and 2 s
    llm.close()


def test_a_long_pacing_wait_is_announced(caplog):
    now = [0.0]
    slept: list[float] = []
    lim = RateLimiter(
        tpm=100, clock=lambda: now[0], sleep=lambda s: (slept.append(s), now.__setitem__(0, now[0] + s))
    )
    lim.acquire(90)
    with caplog.at_level(logging.INFO, logger="allmem.llm"):
        lim.acquire(50)
    assert slept == [60.0]
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == "llm: pacing to llm.rpm=None / llm.tpm=100: waiting 60 s before the next call"


# ------------------------------------------------------------------ settings checked before the run exists


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("rpm", -5, "llm.rpm: must be a number > 0 (or null for unlimited), got -5"),
        ("tpm", 0, "llm.tpm: must be a number > 0 (or null for unlimited), got 0"),
        ("max_concurrency", 0, "llm.max_concurrency: must be a number > 0, got 0"),
        ("timeout_s", -1, "llm.timeout_s: must be a number > 0, got -1"),
        ("call_timeout_s", "soon", "llm.call_timeout_s: must be a number > 0, got 'soon'"),
        ("max_retries", -1, "llm.max_retries: must be a number >= 0, got -1"),
    ],
)
def test_validate_llm_config_names_the_field(key, value, needle):
    with pytest.raises(LLMError) as err:
        validate_llm_config(
            {"_target_": "allmem.llm.openai_backend.OpenAIBackend", "backend": "openai", key: value}
        )
    assert str(err.value) == needle


@pytest.mark.slow  # the CLI in a subprocess
def test_a_negative_rpm_fails_before_the_run_directory_exists(tmp_path):
    res = allmem_run(tmp_path, "method=bm25", f"dataset.path={TINY}", "llm=openai", "llm.rpm=-5")
    assert res.rc == 1 and "Traceback" not in res.err
    assert (
        res.last_line() == "allmem run: error: llm.rpm: must be a number > 0 (or null for unlimited), got -5"
    )
    assert run_dirs(tmp_path) == []


# ------------------------------------------------------------------ damaged response caches


def test_a_garbage_response_cache_is_named_with_how_to_rebuild(tmp_path):
    path = tmp_path / "responses.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(LLMError) as err:
        ResponseCache(path)
    assert str(err.value).startswith(f"llm.cache: {path} is not a readable response cache (DatabaseError: ")
    assert "delete it to rebuild it" in str(err.value)
    with sqlite3.connect(tmp := tmp_path / "other.sqlite") as conn:  # a table of another shape
        conn.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, answer TEXT)")
    with pytest.raises(LLMError, match=f"llm.cache: {tmp} is not a readable response cache .*no such column"):
        ResponseCache(tmp)


def _openai_run(url: str, *extra: str) -> list[str]:
    return [
        "method=bm25", f"dataset.path={TINY}", "llm=openai", f"llm.base_url={url}", "llm.api_key_env=TRUST_KEY",
        "llm.rpm=null", "llm.tpm=null", "llm.backoff_base_s=0.01", "llm.backoff_max_s=0.05", *extra,
    ]  # fmt: skip


@pytest.mark.slow  # the CLI in a subprocess
def test_a_garbage_cache_stops_openai_and_replay_naming_the_file(tmp_path):
    stub = StubLLM().start()
    path = tmp_path / "cache" / "llm" / "responses.sqlite"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00garbage" * 512)
    try:
        live = allmem_run(tmp_path, *_openai_run(stub.base_url), environ=env(TRUST_KEY=KEY))
    finally:
        stub.stop()
    replay = allmem_run(tmp_path, "method=bm25", f"dataset.path={TINY}", "llm=replay")
    for res in (live, replay):
        assert res.rc == 1 and "Traceback" not in res.err, res.err[-2000:]
        assert res.last_line().startswith(
            f"allmem run: error: llm.cache: {path} is not a readable response cache"
        )
        assert "delete it to rebuild it" in res.last_line() and "record it first" not in res.last_line()
    assert run_dirs(tmp_path) == [] and stub.count <= 1  # at most the preflight probe


# ------------------------------------------------------------------ through the CLI: a failed question, then a rerun


@pytest.mark.slow
@pytest.mark.parametrize(
    ("action", "needle"),
    [
        (("choices", []), "reply holds no choices"),
        (("body", (200, "text/html", HTML[2])), "reply is not JSON (text/html"),
        (("content", "caf\ud800"), "lone surrogate"),
    ],
)
def test_empty_replies_fail_the_run_and_a_healthy_rerun_completes(tmp_path, action, needle):
    """Every answer call gets a 200 without a usable answer: the run fails in one line (exit 1, no DONE), the
    failed questions carry the error, nothing is cached; the same command against a healthy stub completes."""
    stub = StubLLM().start()
    environ = env(TRUST_KEY=KEY)
    args = _openai_run(stub.base_url, "llm.max_retries=0", "llm.breaker_after=0")
    try:
        stub.script(*[action] * N_TINY)  # every answer call (the probe is a GET)
        first = allmem_run(tmp_path, *args, environ=environ)
        assert first.rc == 1 and "Traceback" not in first.err, first.err[-2000:]
        assert first.last_line().startswith(f"allmem run: error: {N_TINY} of {N_TINY} questions failed")
        assert needle in first.last_line()
        assert "[allmem] done" not in first.out
        (run_dir,) = run_dirs(tmp_path)
        assert not (run_dir / files.DONE).exists()
        records = files.read_jsonl(run_dir / files.PREDICTIONS)
        assert len(records) == N_TINY and all(needle in r["error"] for r in records)
        with sqlite3.connect(tmp_path / "cache" / "llm" / "responses.sqlite") as conn:
            assert conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 0
        second = allmem_run(tmp_path, *args, environ=environ)
    finally:
        stub.stop()
    assert second.rc == 0, second.err[-2000:]
    assert done_dir(second) == run_dir
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    assert len(records) == N_TINY and not any("error" in r for r in records)
    assert all(r["prediction"] for r in records)


# ------------------------------------------------------------------ invalid judge verdicts: counted, warned, flagged


@pytest.mark.slow
def test_invalid_verdicts_are_counted_warned_about_and_flagged_in_the_footer(tmp_path):
    """One judge reply of the 14 reads as neither yes nor no (1/14 = 7.1% > 2%): the run completes (an invalid
    verdict is an answer, not a failed call), warns in one line, metrics.json counts and rates it, and both the
    overview report and a paper footer carry the flag."""
    from allmem.report.provenance import footer
    from allmem.report.tables import find_runs

    stub = StubLLM().start()
    healthy = stub.reply

    def reply(prompt: str) -> str:
        if (
            "end your reply with exactly [[yes]] or [[no]]" in prompt
            and "What breed is Ben's puppy?" in prompt
        ):
            return "I cannot tell from this."
        return healthy(prompt)

    stub.reply = reply  # type: ignore[method-assign]
    try:
        res = allmem_run(tmp_path, *_openai_run(stub.base_url), environ=env(TRUST_KEY=KEY))
    finally:
        stub.stop()
    assert res.rc == 0, res.err[-2000:]
    run_dir = done_dir(res)
    (warning,) = [line for line in res.err_lines if "verdicts invalid" in line]
    assert (
        "WARNING" in warning and f"judge: 1 of {N_TINY} verdicts invalid (7.1% > 2%) in {run_dir}" in warning
    )
    overall = json.loads((run_dir / files.METRICS).read_text())["overall"]
    assert overall["judge_counts"]["invalid"] == 1 and overall["judge_invalid_rate"] == pytest.approx(
        1 / N_TINY
    )
    (run,) = find_runs(tmp_path / "runs")
    note = f"4o-J invalid verdicts (not in its denominator): {run.label} 1/{N_TINY} (7.1% FLAGGED: above 2%)."
    assert f"*{note}*" in footer([run], "table1")
    report = cli("report", str(tmp_path / "runs"), cwd=tmp_path, timeout=120)
    assert report.rc == 0 and f"*{note}*" in report.out, report.err[-2000:]
