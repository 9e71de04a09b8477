"""Online throughput (scale issue, item 6): calls that do not depend on each other wait on the model together,
with the same result; ``llm.rpm`` / ``llm.tpm`` hold for a whole run, across its processes.

- a tiny All-Mem run against the stub (descriptors, ATC diagnoses, answers, judge over HTTP) at
  ``llm.max_concurrency`` 1 and 16: the same result by the comparison rule, requests really overlapping at 16 and
  never at 1, and every answer's and judge's call booked under its own question;
- ``answer_questions``: predictions in question order whatever order they finish in, retrieval one at a time in
  question order, and a failed call marks only the question it served;
- Ctrl-C while questions are answered concurrently and one model call hangs ends the run at once;
- the shared pacing windows, with a fake clock (hand-computed waits), and two processes against the stub.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from allmem import files
from allmem.llm.ledger import Ledger
from allmem.llm.limiter import RateLimiter
from allmem.run.compare import same_result
from allmem.run.questions import answer_questions
from allmem.types import CallRecord, Prediction, Question
from tests.faultkit import FIXTURES, env, popen_run
from tests.llm_stub import StubLLM
from tests.runkit import compose_and_run

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-online-scale-0000"


@pytest.mark.slow
def test_concurrent_online_allmem_run_is_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALLMEM_SCALE_KEY", KEY)
    runs, in_flight = {}, {}
    stub = StubLLM(delay_s=0.05).start()  # long enough for concurrent requests to overlap at the stub
    try:
        for n in (1, 16):
            stub.max_in_flight = 0
            runs[n] = compose_and_run(
                tmp_path / str(n) / "runs", "method=allmem", "embedder=hash",
                f"dataset.path={REPO / 'tests/fixtures/locomo_tiny.json'}", "llm=openai", f"llm.base_url={stub.base_url}",
                "llm.api_key_env=ALLMEM_SCALE_KEY", "llm.rpm=null", "llm.tpm=null", f"llm.max_concurrency={n}",
                "run.progress=false", debug=False, cache=tmp_path / str(n) / "cache",
            )  # fmt: skip
            in_flight[n] = stub.max_in_flight
    finally:
        stub.stop()
    assert same_result(runs[1], runs[16]) == []
    assert in_flight[1] == 1 and in_flight[16] > 1
    calls = files.read_jsonl(runs[16] / files.CALLS)
    assert {c["phase"] for c in calls} >= {"write", "diagnose", "generate", "judge"}  # all of it over HTTP
    booked = {(c["question_id"], c["prompt_hash"]) for c in calls if c["phase"] in ("generate", "judge")}
    preds = files.read_jsonl(runs[16] / files.PREDICTIONS)
    assert len(booked) == 2 * len(preds) > 0
    for p in preds:  # each question's answer and verdict are booked under that question, none under another
        assert (p["question_id"], p["answer"]["prompt_hash"]) in booked
        assert (p["question_id"], p["judge"]["prompt_hash"]) in booked
    assert all(c["question_id"] is None for c in calls if c["phase"] in ("write", "diagnose"))


@pytest.mark.slow
def test_ctrl_c_while_questions_wait_on_a_hanging_call_ends_at_once(tmp_path: Path) -> None:
    stub = StubLLM().start()
    stub.script(("delay", 30.0))  # the first answer call hangs; the questions after it go on concurrently
    args = [
        "method=bm25", f"dataset.path={FIXTURES / 'locomo_tiny.json'}", "run.name=r", "llm=openai",
        f"llm.base_url={stub.base_url}", "llm.api_key_env=SCALE_KEY", "llm.rpm=null", "llm.tpm=null",
        "llm.timeout_s=60", "llm.max_concurrency=4",
    ]  # fmt: skip
    try:
        proc = popen_run(tmp_path, *args, environ=env(SCALE_KEY=KEY))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and stub.count < 4:
            time.sleep(0.05)
        assert proc.poll() is None and stub.count >= 4, "the run never got to its questions"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        assert time.monotonic() - t0 < 10  # not after the hanging call's 30 s
        assert proc.returncode == 128 + signal.SIGINT, err[-2000:]
        # one error line, the last line that is not a log record (requests finishing in daemon threads may still
        # log after it, as many as were in flight)
        said = [x for x in err.splitlines() if x.strip() and not x.startswith("[")]
        assert said and said[-1].startswith("allmem run: error: interrupted by SIGINT"), err

        assert not (tmp_path / "runs" / "r" / files.DONE).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        stub.stop()


class _LedgerLLM:
    """What ``answer_questions`` reads of a client: its ledger and ``max_concurrency``."""

    def __init__(self, max_concurrency: int) -> None:
        self.ledger = Ledger()
        self.max_concurrency = max_concurrency


def _question(i: int) -> Question:
    return Question(id=f"q{i}", dialogue_id="d", text=f"question {i}", gold="g", evidence=(), category=1)


def test_answer_questions_keeps_question_order_and_blames_only_the_failing_question() -> None:
    llm = _LedgerLLM(max_concurrency=4)
    started = threading.Barrier(4)

    def answer(q: Question, system: Any, generator: Any) -> Prediction:
        i = int(q.id[1:])
        if i < 4:
            started.wait(timeout=10)  # the first four really run at once
        time.sleep(0.05 * (4 - i % 4))  # later questions of each four finish first
        rec = CallRecord(
            "generate", "b", "m", 1, 1, 1.0, False, f"h{i}", ok=i != 2, error="boom" if i == 2 else None
        )
        llm.ledger.record(rec)
        system.retrieve(q.text)
        return Prediction(q.id, "d", q.text, prediction=str(i), gold="g", evidence=(), ranked_source_ids=())

    class System:
        def __init__(self) -> None:
            self.inside, self.most, self.order = 0, 0, []

        def retrieve(self, text: str) -> None:
            self.order.append(text)
            self.inside += 1
            self.most = max(self.most, self.inside)
            time.sleep(0.01)
            self.inside -= 1

    system = System()
    preds = list(
        answer_questions([_question(i) for i in range(8)], answer, system=system, generator=None, llm=llm)
    )
    assert [p.question_id for p in preds] == [f"q{i}" for i in range(8)]
    assert [p.error is not None for p in preds] == [i == 2 for i in range(8)]
    assert preds[2].error == "LLM calls failed after their retries (1 generate); last: boom"
    assert system.most == 1 and system.order == [f"question {i}" for i in range(8)]  # one at a time, in order
    assert llm.ledger.totals()["generate"]["calls"] == 8


def test_shared_window_paces_two_limiters_as_one(tmp_path: Path) -> None:
    now = [1000.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    path = tmp_path / "run" / files.PACING
    a, b = (RateLimiter(rpm=2, clock=lambda: now[0], sleep=sleep, shared=path) for _ in range(2))
    a.acquire()
    now[0] = 1010.0
    b.acquire()  # the second request of the run's minute: no wait
    a.acquire()  # the third waits until the first (t=1000) leaves the window: 1060 - 1010 = 50 s
    assert slept == [50.0]
    alone = RateLimiter(rpm=2, clock=lambda: now[0], sleep=sleep, shared=tmp_path / "other" / files.PACING)
    alone.acquire()  # another run's file: its own window
    assert slept == [50.0]

    now[0], slept[:] = 5000.0, []
    c, d = (
        RateLimiter(tpm=100, clock=lambda: now[0], sleep=sleep, shared=tmp_path / "t" / files.PACING)
        for _ in range(2)
    )
    c.acquire(60)
    now[0] = 5010.0
    d.acquire(50)  # 60 + 50 > 100 tokens in the run's minute: waits until the 60 leave, at 5060
    assert slept == [50.0]


def test_unpaced_limiter_makes_no_file(tmp_path: Path) -> None:
    lim = RateLimiter(rpm=None, tpm=None, shared=tmp_path / files.PACING)
    lim.acquire(10)
    assert lim.shared is None and not (tmp_path / files.PACING).exists()


_CALLER = textwrap.dedent(
    """
    import sys
    from allmem.llm import build_llm
    from allmem.memory.descriptor import describe
    from allmem.tokens import count_tokens

    url, run_dir, tag = sys.argv[1:4]
    llm = build_llm({"_target_": "allmem.llm.openai_backend.OpenAIBackend", "backend": "openai",
                     "model": "gpt-4o-mini", "base_url": url, "api_key_env": "ALLMEM_SCALE_KEY", "rpm": 6,
                     "tpm": None, "max_concurrency": 1, "cache": {"enabled": False}}, run_dir=run_dir)
    count_tokens("warm up"), llm.backend._get_client()  # imports and the tokenizer before the timed part
    print("calling", flush=True)
    for i in range(6):
        describe(llm, [{"speaker": "Ann", "text": f"{tag} fact {i}", "caption": None, "date": "8 May 2023",
                        "source_ids": [f"D1:{i}"]}])
    """
)


def _two_callers(stub: StubLLM, tmp_path: Path, run_dirs: tuple[Path, Path], expect: int) -> list[int]:
    """Two processes of six calls each at rpm 6: the stub's requests per second, counted until ``expect`` have
    arrived and then two seconds more (each process makes its six calls well within that when not paced)."""
    env = {
        "ALLMEM_SCALE_KEY": KEY,
        "PYTHONPATH": str(REPO),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "ALLMEM_CACHE": str(tmp_path / "cache"),
        "TIKTOKEN_CACHE_DIR": str(tmp_path / "tiktoken"),
    }
    since = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CALLER, stub.base_url, str(d), f"p{i}"],
            env=env,
            cwd=tmp_path,  # with ALLMEM_CACHE and TIKTOKEN_CACHE_DIR above: nothing lands in the checkout
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i, d in enumerate(run_dirs)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "calling"
        deadline = time.monotonic() + 60
        while stub.count < expect and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(2.0)
        return stub.per_second(since)
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.slow
def test_rpm_holds_for_the_run_across_two_processes(tmp_path: Path) -> None:
    stub = StubLLM().start()
    try:
        shared = _two_callers(stub, tmp_path, (tmp_path / "run", tmp_path / "run"), expect=6)
        stub.requests.clear()
        apart = _two_callers(stub, tmp_path, (tmp_path / "run_a", tmp_path / "run_b"), expect=12)
    finally:
        stub.stop()
    assert sum(shared) == 6  # one run: 6 requests a minute in all, the other 6 wait for the next minute
    assert sum(apart) == 12  # two runs: each has its own minute
