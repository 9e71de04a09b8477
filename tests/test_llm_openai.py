"""The openai backend: the real openai client against a scripted stub server on 127.0.0.1 (tests/llm_stub.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from allmem.files import read_jsonl
from allmem.llm import LLMError, ReplayMiss, build_llm
from allmem.llm.prompts import build_request
from allmem.llm.roles import RoleFailure
from allmem.memory.atc.roles import diagnose, plan_merge
from allmem.memory.descriptor import Descriptor, describe
from allmem.metrics.judge import judge_record
from tests.llm_stub import StubLLM, usage_for

KEY = "sk-test-SECRET-7f3a9c"
EVIDENCE = [{"speaker": "Caroline", "text": "I went to a support group yesterday.", "caption": None,
             "date": "8 May 2023", "source_ids": ["D1:3"]}]  # fmt: skip


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALLMEM_TEST_KEY", KEY)


def make(stub: StubLLM, tmp_path: Path, run: str = "run", **over):  # noqa: ANN201 - returns allmem.llm.LLM
    cfg = {
        "_target_": "allmem.llm.openai_backend.OpenAIBackend", "backend": "openai", "model": "gpt-4o-mini", "base_url": stub.base_url, "api_key_env": "ALLMEM_TEST_KEY",
        "timeout_s": 10, "max_retries": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05, "max_concurrency": 2,
        "rpm": None, "tpm": None, "cache": {"enabled": True, "path": "responses.sqlite"},
        "judge": {"enabled": True, "model": "gpt-4o", "n_votes": 1},
    } | over  # fmt: skip
    return build_llm(cfg, run_dir=tmp_path / run, cache_dir=tmp_path / "cache")


def test_json_mode_request_shape(stub: StubLLM, tmp_path: Path) -> None:
    llm = make(stub, tmp_path)
    d = describe(llm, EVIDENCE)
    assert isinstance(d, Descriptor) and d.summary == "Caroline: I went to a support group yesterday."
    (req,) = stub.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {KEY}"
    body = req.body
    assert body["model"] == "gpt-4o-mini" and body["temperature"] == 0.0
    assert body["response_format"] == {"type": "json_object"}
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "[8 May 2023] Caroline: I went to a support group yesterday." in body["messages"][1]["content"]
    assert "seed" not in body and "max_tokens" not in body


def test_json_schema_mode_sends_the_templates_schema_and_the_reply_cap(stub: StubLLM, tmp_path: Path) -> None:
    """``llm.json_schema`` (llm=local): the template's schema rides in response_format, which llama.cpp's
    server turns into a grammar; ``llm.max_tokens`` caps a role that sets no cap of its own."""
    from allmem.llm.prompts import load_template

    llm = make(stub, tmp_path, json_schema=True, max_tokens=256)
    assert isinstance(describe(llm, EVIDENCE), Descriptor)
    body = stub.requests[0].body
    assert body["response_format"] == {"type": "json_object", "schema": load_template("descriptor").schema}
    assert body["max_tokens"] == 256


def test_grammar_mode_sends_a_judges_verdict_grammar_and_keys_the_cache_by_it(
    stub: StubLLM, tmp_path: Path
) -> None:
    """``llm.grammar`` (llm=local): a judge template's ``@@ grammar`` goes as the request's ``grammar`` field
    and into the cache key; a backend without the mode sends none and keeps its keys."""
    from allmem.llm.prompts import build_request, load_template

    req = build_request("judge_allmem_default", {"question": "q", "gold": "g", "response": "r"})
    assert req.grammar == load_template("judge_allmem_default").grammar and "[[" in req.grammar
    llm = make(stub, tmp_path, grammar=True)
    stub.script(("content", "Right. [[yes]]"))
    assert llm.chat(req).text == "Right. [[yes]]"
    assert stub.requests[0].body["grammar"] == req.grammar
    assert llm.params_for(req)[1]["grammar"] == req.grammar
    plain = make(stub, tmp_path, run="plain")
    assert "grammar" not in plain.params_for(req)[1] and "json_schema" not in plain.params_for(req)[1]


def test_429_then_success_retries_exactly_once(stub: StubLLM, tmp_path: Path) -> None:
    llm = make(stub, tmp_path)
    stub.script(("status", 429))
    assert isinstance(describe(llm, EVIDENCE), Descriptor)
    assert stub.count == 2
    (line,) = read_jsonl(tmp_path / "run" / "calls.jsonl")
    assert line["retries"] == 1 and line["ok"] is True


def test_timeout_is_retried(stub: StubLLM, tmp_path: Path) -> None:
    llm = make(stub, tmp_path, timeout_s=0.3)
    stub.script(("delay", 1.0))
    assert isinstance(describe(llm, EVIDENCE), Descriptor)
    assert stub.count == 2
    (line,) = read_jsonl(tmp_path / "run" / "calls.jsonl")
    assert line["retries"] == 1


def test_5xx_exhausting_retries_is_a_failed_result_not_an_exception(stub: StubLLM, tmp_path: Path) -> None:
    llm = make(stub, tmp_path, max_retries=2)
    stub.script(("status", 500), ("status", 502), ("status", 503))
    out = describe(llm, EVIDENCE)
    assert isinstance(out, RoleFailure) and out.kind == "transport"
    assert stub.count == 3  # first try + 2 retries
    assert llm.totals()["write"]["failed"] == 1
    assert len(llm.cache) == 0  # failures are not cached
    assert isinstance(describe(llm, EVIDENCE), Descriptor)  # the next call goes through


def test_malformed_json_is_a_typed_failure(stub: StubLLM, tmp_path: Path) -> None:
    llm = make(stub, tmp_path)
    stub.script(("content", '{"summary": "x", "keywords": [unquoted]}'))
    out = describe(llm, EVIDENCE)
    assert isinstance(out, RoleFailure) and out.kind == "invalid_json" and "unquoted" in out.raw
    (line,) = read_jsonl(tmp_path / "run" / "calls.jsonl")
    assert line["ok"] is False and line["parse_error"] == "invalid_json"
    stub.script(("content", '{"summary": "x"}'))
    other = diagnose(llm, {"id": "u1", "summary": "s", "keywords": [], "evidence": EVIDENCE}, [])
    assert isinstance(other, RoleFailure) and other.kind == "schema" and "proposals" in other.message


def test_rerun_is_served_from_cache_with_zero_server_calls(stub: StubLLM, tmp_path: Path) -> None:
    first = describe(make(stub, tmp_path, run="a"), EVIDENCE)
    n = stub.count
    llm2 = make(stub, tmp_path, run="b")  # a new process would build exactly this
    second = describe(llm2, EVIDENCE)
    assert second == first and stub.count == n
    (line,) = read_jsonl(tmp_path / "b" / "calls.jsonl")
    assert line["cached"] is True
    assert llm2.totals()["write"]["cache_hits"] == 1 and llm2.totals()["write"]["spent_tokens_in"] == 0


def test_usage_from_the_response_lands_in_the_ledger(stub: StubLLM, tmp_path: Path) -> None:
    llm = make(stub, tmp_path)
    describe(llm, EVIDENCE)
    (req,) = stub.requests
    prompt = "\n".join(m["content"] for m in req.body["messages"])
    reply = stub.reply(prompt)
    (line,) = read_jsonl(tmp_path / "run" / "calls.jsonl")
    expected = usage_for(prompt, reply)
    assert (line["tokens_in"], line["tokens_out"]) == (
        expected["prompt_tokens"],
        expected["completion_tokens"],
    )
    assert line["estimated"] is False and line["backend"] == "openai" and line["model"] == "gpt-4o-mini"


def test_replay_answers_from_cache_and_names_misses(stub: StubLLM, tmp_path: Path) -> None:
    describe(make(stub, tmp_path), EVIDENCE)
    n = stub.count
    replay = build_llm(
        {
            "_target_": "allmem.llm.openai_backend.ReplayBackend",
            "backend": "replay",
            "model": "gpt-4o-mini",
            "cache": {"enabled": True, "path": "responses.sqlite"},
        },
        run_dir=tmp_path / "replay",
        cache_dir=tmp_path / "cache",
    )
    assert isinstance(describe(replay, EVIDENCE), Descriptor)
    other = [dict(EVIDENCE[0], text="Something never recorded.")]
    with pytest.raises(ReplayMiss) as exc:
        describe(replay, other)
    assert (
        exc.value.phase == "write"
        and exc.value.prompt_hash in str(exc.value)
        and "phase=write" in str(exc.value)
    )
    assert stub.count == n


def test_the_key_is_in_no_file_and_no_error(
    stub: StubLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = make(stub, tmp_path)
    describe(llm, EVIDENCE)
    judge_record(llm, {"question_id": "q1", "question": "Q?", "gold": "support group", "prediction": "a support group",
                       "category": 4}, "allmem")  # fmt: skip
    stub.script(("status", 500), ("status", 500), ("status", 500), ("status", 500))
    failed = llm.chat(build_request("descriptor", {"evidence": "[d] A: other", "n_keywords": "3"}))
    assert failed.error and KEY not in failed.error
    assert KEY not in repr(llm.describe())
    llm.close()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".sqlite" for p in written) and any(p.name == "calls.jsonl" for p in written)
    for p in written:
        assert KEY.encode() not in p.read_bytes(), p
    monkeypatch.delenv("ALLMEM_TEST_KEY")
    with pytest.raises(LLMError, match="ALLMEM_TEST_KEY") as exc:
        describe(make(stub, tmp_path, cache={"enabled": False}), EVIDENCE)
    assert KEY not in str(exc.value)


def test_proxy_variables_do_not_divert_requests(
    stub: StubLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert isinstance(describe(make(stub, tmp_path, cache={"enabled": False}), EVIDENCE), Descriptor)
    assert stub.count == 1


def test_auth_failure_stops_with_a_clear_error(stub: StubLLM, tmp_path: Path) -> None:
    stub.script(("status", 401))
    with pytest.raises(LLMError, match="AuthenticationError"):
        describe(make(stub, tmp_path), EVIDENCE)


# ---------------------------------------------------------------- judges


RECORD = {"question_id": "conv-26_q1", "question": "Where did Caroline go?", "gold": "support group",
          "prediction": "A support group.", "category": 4}  # fmt: skip


@pytest.mark.parametrize("protocol", ["allmem", "mem0", "longmemeval"])
def test_judge_verdicts_per_protocol(stub: StubLLM, tmp_path: Path, protocol: str) -> None:
    llm = make(stub, tmp_path)
    right = judge_record(llm, RECORD, protocol)
    wrong = judge_record(llm, RECORD | {"prediction": "The gym."}, protocol)
    assert right is not None and right["verdict"] == "yes" and right["model"] == "gpt-4o"
    assert wrong is not None and wrong["verdict"] == "no"
    body = stub.requests[0].body
    assert body["model"] == "gpt-4o" and body["temperature"] == 0.0
    assert ("response_format" in body) == (protocol == "mem0")  # only mem0's judge asks for JSON


def test_judge_templates_follow_question_types(stub: StubLLM, tmp_path: Path) -> None:
    llm = make(stub, tmp_path)
    assert judge_record(llm, RECORD | {"category": 2}, "allmem")["template"] == "judge_allmem_temporal"
    lme = {"question_id": "q9_abs", "question": "Q?", "gold": "never said", "prediction": "x",
           "question_type": "knowledge-update"}  # fmt: skip
    assert judge_record(llm, lme, "allmem")["template"] == "judge_allmem_abstention"
    assert judge_record(llm, lme | {"question_id": "q9"}, "longmemeval")["template"] == "judge_lme_update"
    assert judge_record(llm, RECORD | {"category": 5}, "mem0") is None  # mem0 scores categories 1-4 only
    assert "off-by-one" in stub.requests[0].body["messages"][0]["content"]


def test_invalid_allmem_reply_and_majority_vote(stub: StubLLM, tmp_path: Path) -> None:
    llm = make(stub, tmp_path)
    stub.script(("content", "I am not sure."))
    assert judge_record(llm, RECORD, "allmem")["verdict"] == "invalid"
    stub.script(("content", "ok [[yes]]"), ("content", "hmm [[no]]"), ("content", "fine [[yes]]"))
    out = judge_record(llm, RECORD | {"question": "Where did Caroline go then?"}, "allmem", n_votes=3)
    assert out["verdict"] == "yes" and out["votes"] == ["yes", "no", "yes"]
    assert out["agreement"] == pytest.approx(2 / 3)
    seeds = [r.body.get("seed") for r in stub.requests[-3:]]
    assert seeds == [None, 1, 2]  # each vote is its own request (and its own cache entry)
    stub.script(("content", "[[yes]]"), ("content", "[[no]]"))
    tie = judge_record(llm, RECORD | {"question": "And where else?"}, "allmem", n_votes=2)
    assert tie["verdict"] == "invalid" and tie["agreement"] == 0.0


def test_judge_record_verdicts_and_offline_cannot_judge(stub: StubLLM, tmp_path: Path) -> None:
    llm = make(stub, tmp_path)
    recs = [
        RECORD | {"question_id": f"q{i}", "prediction": p}
        for i, p in enumerate(["support group", "gym", "group"])
    ]
    verdicts = [judge_record(llm, r, "allmem")["verdict"] for r in recs]
    assert verdicts == ["yes", "no", "no"]
    offline = build_llm(
        {"_target_": "allmem.llm.offline.OfflineBackend", "backend": "offline", "cache": {"enabled": False}},
        cache_dir=tmp_path,
    )
    assert judge_record(offline, RECORD, "allmem") is None
    assert not offline.can_judge


def test_merge_planner_round_trip(stub: StubLLM, tmp_path: Path) -> None:
    llm = make(stub, tmp_path)
    units = [
        {"id": f"u{i}", "summary": "s", "keywords": ["k"], "evidence": EVIDENCE, "date": "8 May 2023"}
        for i in (1, 2)
    ]
    plan = plan_merge(llm, units)
    assert plan == {"summary": "stub summary", "keywords": ["stub"], "decline": True}
    assert "id: u1 | date: 8 May 2023" in stub.requests[0].body["messages"][1]["content"]
