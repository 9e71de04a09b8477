"""A small model's unusable replies (issue 31): a JSON role's reply that does not parse is asked again
(``llm.repair_retries``) and then fails closed; a judge reply with no verdict is asked again and then counted
invalid; every try is booked, so per-role invalid / unusable counts come from calls.jsonl; a prompt over
``llm.context_window`` is never sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from allmem.files import read_jsonl
from allmem.llm import build_llm
from allmem.llm.ledger import roles_of
from allmem.llm.prompts import build_request
from allmem.metrics.judge import judge_record

DESCRIPTOR = {"evidence": "[8 May 2023] Caroline: I went to a support group.", "n_keywords": "3"}
GOOD = {"summary": "Caroline went to a support group on 8 May 2023.", "keywords": ["support group"]}


def scripted(tmp_path: Path, script: dict, **over) -> object:
    cfg = {
        "_target_": "allmem.llm.scripted.ScriptedBackend",
        "backend": "scripted",
        "script": script,
        "cache": {"enabled": True, "path": str(tmp_path / "cache.sqlite")},
    } | over
    return build_llm(cfg, run_dir=tmp_path / "run", cache_dir=tmp_path)


def calls(tmp_path: Path) -> list[dict]:
    return read_jsonl(tmp_path / "run" / "calls.jsonl")


def test_a_bad_json_reply_is_repaired_once_and_the_repair_sees_it(tmp_path: Path) -> None:
    llm = scripted(
        tmp_path, {"descriptor": ["Sure! Here is the summary: Caroline went.", GOOD]}, repair_retries=1
    )
    res = llm.chat(build_request("descriptor", DESCRIPTOR))
    assert res.data == GOOD and res.parse_error is None
    first, second = llm.backend.seen
    assert second.repair == 1 and second.messages[: len(first.messages)] == first.messages
    assert second.messages[-2] == {
        "role": "assistant",
        "content": "Sure! Here is the summary: Caroline went.",
    }
    assert "the reply holds no JSON object" in second.messages[-1]["content"]
    lines = calls(tmp_path)
    assert [line.get("repair", 0) for line in lines] == [0, 1]
    assert lines[0]["parse_error"] == "no_json" and lines[1]["parse_error"] is None
    assert lines[1]["repair_of"] == lines[0]["prompt_hash"] and lines[1]["template"] == "descriptor"
    assert roles_of(lines)["descriptor"] == {
        "calls": 1, "invalid": 1, "repairs": 1, "unusable": 0, "failed": 0, "invalid_rate": 1.0, "unusable_rate": 0.0,
    }  # fmt: skip


def test_a_reply_still_bad_after_the_last_repair_fails_closed_and_is_counted(tmp_path: Path) -> None:
    bad = {"summary": "", "keywords": []}  # parses, but breaks the schema (minLength 1)
    llm = scripted(tmp_path, {"descriptor": [bad, '{"summary": x}', bad, GOOD]}, repair_retries=2)
    res = llm.chat(build_request("descriptor", DESCRIPTOR))
    assert res.data is None and res.parse_error.kind == "schema"  # the caller's fallback takes over
    lines = calls(tmp_path)
    assert [(line.get("repair", 0), line["parse_error"]) for line in lines] == [
        (0, "schema"), (1, "invalid_json"), (2, "schema")
    ]  # fmt: skip
    roles = roles_of(lines)["descriptor"]
    assert (roles["calls"], roles["invalid"], roles["repairs"], roles["unusable"]) == (1, 1, 2, 1)
    assert roles["unusable_rate"] == 1.0


def test_repairs_replay_from_the_cache_with_no_request(tmp_path: Path) -> None:
    script = {"descriptor": ["no json here", GOOD]}
    scripted(tmp_path, script, repair_retries=1).chat(build_request("descriptor", DESCRIPTOR))
    again = scripted(
        tmp_path, {"descriptor": []}, repair_retries=1
    )  # an empty script: any request would fail
    res = again.chat(build_request("descriptor", DESCRIPTOR))
    assert res.data == GOOD and res.cached and again.backend.seen == []


def test_no_repair_by_default_and_never_offline(tmp_path: Path) -> None:
    llm = scripted(tmp_path, {"descriptor": ["no json here", GOOD]})
    assert llm.chat(build_request("descriptor", DESCRIPTOR)).parse_error.kind == "no_json"
    assert len(llm.backend.seen) == 1
    offline = build_llm(
        {"_target_": "allmem.llm.offline.OfflineBackend", "backend": "offline", "model": "offline",
         "cache": {"enabled": False}, "repair_retries": 3},
    )  # fmt: skip
    assert (
        offline.repair(
            build_request("descriptor", DESCRIPTOR), llm.chat(build_request("descriptor", DESCRIPTOR)), "x"
        )
        is None
    )


class _Judging:
    """The scripted client, allowed to judge (the scripted backend itself cannot)."""

    def __init__(self, llm: object) -> None:
        self._llm = llm
        self.can_judge = True

    def __getattr__(self, name: str) -> object:
        return getattr(self._llm, name)


RECORD = {"question": "Where did Caroline go?", "gold": "a support group", "prediction": "a support group",
          "category": 1}  # fmt: skip


@pytest.mark.parametrize(
    ("replies", "verdict", "asked"),
    [
        (["I think it is right.", "[[yes]]"], "yes", 2),  # no verdict, then one after the repair
        (["Hmm.", "Still no idea."], "invalid", 2),  # no verdict after the last repair: invalid
        (["[[no]]"], "no", 1),  # a verdict at once: no repair
    ],
)
def test_a_judge_reply_with_no_verdict_is_asked_again_then_invalid(
    tmp_path: Path, replies: list[str], verdict: str, asked: int
) -> None:
    llm = scripted(tmp_path, {"judge_allmem_default": replies}, repair_retries=1)
    out = judge_record(_Judging(llm), RECORD, "allmem")
    assert out["verdict"] == verdict and len(llm.backend.seen) == asked
    roles = roles_of(calls(tmp_path))["judge_allmem_default"]
    assert (roles["calls"], roles["invalid"], roles["repairs"]) == (1, asked - 1, asked - 1)


def test_a_prompt_over_the_context_window_is_never_sent(tmp_path: Path) -> None:
    llm = scripted(tmp_path, {"descriptor": [GOOD]}, context_window=120, max_tokens=100)
    res = llm.chat(build_request("descriptor", DESCRIPTOR))
    assert llm.backend.seen == [] and res.data is None
    assert "exceeds llm.context_window=120: not sent" in res.error and "reply's cap of 100" in res.error
    (line,) = calls(tmp_path)
    assert line["ok"] is False and "llm.context_window" in line["error"]
    assert roles_of([line])["descriptor"]["failed"] == 1
    roomy = scripted(tmp_path / "b", {"descriptor": [GOOD]}, context_window=4096, max_tokens=100)
    assert roomy.chat(build_request("descriptor", DESCRIPTOR)).data == GOOD
    assert roomy.backend.seen[0] is not None


def test_max_tokens_caps_a_role_that_sets_none_and_is_in_the_cache_key(tmp_path: Path) -> None:
    llm = scripted(tmp_path, {}, max_tokens=64)
    req = build_request("descriptor", DESCRIPTOR)
    assert llm.params_for(req)[1]["max_tokens"] == 64
    assert llm.params_for(build_request("descriptor", DESCRIPTOR, max_tokens=10))[1]["max_tokens"] == 10
    assert scripted(tmp_path / "b", {}).params_for(req)[1]["max_tokens"] is None
