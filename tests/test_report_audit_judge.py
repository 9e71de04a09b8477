"""Table 8's LLM labeler against the local stub server: its own template per operator, votes, replay, dry run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from allmem.llm import build_llm
from allmem.report.audit import Edit, Label
from allmem.report.audit.judge import Judge
from tests.llm_stub import StubLLM

KEY = "sk-test-audit"
JUDGE = {"enabled": True, "model": "gpt-4o", "n_votes": 3}


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALLMEM_TEST_KEY", KEY)


def openai(stub: StubLLM, tmp_path: Path, **over):  # noqa: ANN201 - allmem.llm.LLM
    cfg = {
        "_target_": "allmem.llm.openai_backend.OpenAIBackend", "backend": "openai", "model": "gpt-4o-mini",
        "base_url": stub.base_url, "api_key_env": "ALLMEM_TEST_KEY", "timeout_s": 10, "max_retries": 0,
        "rpm": None, "tpm": None, "cache": {"enabled": True, "path": "responses.sqlite"}, "judge": JUDGE,
    } | over  # fmt: skip
    return build_llm(cfg, run_dir=tmp_path / "run", cache_dir=tmp_path / "cache")


def unit(uid: str, text: str, visible: bool = True) -> dict:
    return {"id": uid, "date": "2023-05-08T13:00:00", "order": 1, "summary": f"Ann: {text}", "keywords": ["k"],
            "visible": visible, "evidence": [{"speaker": "Ann", "text": text, "caption": None, "date": "8 May 2023",
                                              "source_ids": [f"D1:{uid[-1]}"]}]}  # fmt: skip


UPDATE = Edit("run", {"kind": "target", "state": "executed", "op": "update", "dialogue": "conv-1", "run": 1,
                      "ids": ["u2", "u1"], "before": [unit("u2", "I live in Denver now."), unit("u1", "I live in Boston.")],
                      "after": [unit("u2", "I live in Denver now."), unit("u1", "I live in Boston.", False)],
                      "links": [["version", "u2", "u1"]]})  # fmt: skip
MERGE = Edit("run", {"kind": "target", "state": "executed", "op": "merge", "dialogue": "conv-1", "run": 1,
                     "ids": ["u3", "u4"], "before": [unit("u3", "I drive a Civic."), unit("u4", "My sister drives a Prius.")],
                     "after": [unit("u3", "I drive a Civic.", False)], "links": []})  # fmt: skip


def reply(valid: bool, harmful: bool) -> tuple[str, str]:
    return ("content", json.dumps({"valid": valid, "harmful": harmful, "reason": "stub"}))


def test_sends_its_own_template_and_takes_the_majority(stub: StubLLM, tmp_path: Path) -> None:
    # update: votes valid (yes, yes, no), harmful (no, no, no); merge: valid (no, no, no), harmful (yes, no, yes)
    stub.script(reply(True, False), reply(True, False), reply(False, False),
                reply(False, True), reply(False, False), reply(False, True))  # fmt: skip
    judge = Judge(openai(stub, tmp_path))
    labels = judge.label([UPDATE, MERGE])
    assert labels == [Label(True, False, reason="stub"), Label(False, True, reason="stub")]
    assert stub.count == 6 and judge.name == "LLM judge (gpt-4o, 3 votes)"
    bodies = [r.body for r in stub.requests]
    assert {b["model"] for b in bodies} == {"gpt-4o"}  # the judge model (4o-J)
    user = [b["messages"][1]["content"] for b in bodies]
    assert all("The system executed an Update edit." in u for u in user[:3])
    assert all("The system executed a Merge edit." in u for u in user[3:])
    assert "I live in Boston." in user[0] and "version: u2 -> u1" in user[0] and "archived" in user[0]
    calls = [json.loads(line) for line in (tmp_path / "run" / "calls.jsonl").read_text().splitlines()]
    assert [c["template"] for c in calls] == ["audit_update"] * 3 + ["audit_merge"] * 3


def test_replay_labels_again_with_zero_requests(stub: StubLLM, tmp_path: Path) -> None:
    stub.script(*[reply(True, False)] * 3, *[reply(False, True)] * 3)
    first = Judge(openai(stub, tmp_path)).label([UPDATE, MERGE])
    n = stub.count
    replay = build_llm(
        {"_target_": "allmem.llm.openai_backend.ReplayBackend", "backend": "replay", "model": "gpt-4o-mini",
         "cache": {"enabled": True, "path": "responses.sqlite"}, "judge": JUDGE},
        run_dir=tmp_path / "replay", cache_dir=tmp_path / "cache",
    )  # fmt: skip
    assert Judge(replay).label([UPDATE, MERGE]) == first and stub.count == n


def test_a_tie_is_undecided_and_a_failed_vote_is_not_counted(stub: StubLLM, tmp_path: Path) -> None:
    stub.script(reply(True, False), reply(False, False), reply(True, True), ("content", "not json"))
    tie, one = Judge(openai(stub, tmp_path), n_votes=2).label([UPDATE, MERGE])
    assert (tie.valid, tie.harmful) == (None, False)  # valid: one yes, one no
    assert (one.valid, one.harmful) == (True, True)  # the unreadable vote is left out
    assert stub.count == 4


def test_dry_run_books_an_estimate_and_calls_nothing(stub: StubLLM, tmp_path: Path) -> None:
    judge = Judge(openai(stub, tmp_path, dry_run=True))
    labels = judge.label([UPDATE, MERGE])
    assert stub.count == 0 and all(lb.valid is None and lb.harmful is None for lb in labels)
    est = judge.estimate()
    assert est["calls"] == 6 and est["tokens_in"] > 0 and est["tokens_out"] == 6 * 70  # est_tokens_out: 70


def test_one_vote_rule_for_every_judge() -> None:
    """4o-J, the graded re-judge and Table 8's labels count votes with ``allmem.metrics.judge.majority``."""
    from allmem.metrics.judge import majority

    assert majority(["yes", "no", "yes", "invalid"]) == "yes"
    assert majority(["yes", "no", "invalid"]) is None  # a tie
    assert majority(["invalid", "invalid"]) is None  # nothing decided
    assert majority(["correct", "partial", "partial", "wrong"]) == "partial"
    assert majority([True, None, None], undecided=(None,)) is True
    assert majority([True, False, None], undecided=(None,)) is None
