"""ATC through the real openai client against the stub server (127.0.0.1): the prompts a model would see, the
JSON it returns, and an executed merge; no payload or offline role is involved on this path."""

from __future__ import annotations

import json

from allmem.defaults import paper
from allmem.embed import HashEmbedder
from allmem.llm import build_llm
from allmem.memory.atc.config import ATCConfig
from allmem.memory.atc.consolidator import build_consolidator
from tests.fakes import make_bank
from tests.llm_stub import StubLLM

KEY = "sk-test-atc"


def test_consolidation_over_the_openai_backend(stub: StubLLM, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ALLMEM_TEST_KEY", KEY)
    llm = build_llm(
        {"_target_": "allmem.llm.openai_backend.OpenAIBackend", "backend": "openai", "model": "gpt-4o-mini", "base_url": stub.base_url, "api_key_env": "ALLMEM_TEST_KEY",
         "max_retries": 1, "max_concurrency": 1, "cache": {"enabled": False}},
        run_dir=tmp_path,
    )  # fmt: skip
    none = ("content", json.dumps({"proposals": []}))
    merge = {"op": "Merge", "target": ["u000002", "u000001"], "p": 0.93, "reason": "same car, restated"}
    plan = {"summary": "Ann drives a Honda Civic.", "keywords": ["Honda Civic"], "decline": False}
    # workers=1 and max_concurrency=1: the five diagnosis requests arrive in buffer order, then the merge plan
    stub.script(
        none, none, ("content", json.dumps({"proposals": [merge]})), none, none, ("content", json.dumps(plan))
    )
    bank = make_bank()
    c = build_consolidator(
        bank=bank,
        llm=llm,
        embedder=HashEmbedder(dim=64),
        cfg=paper(ATCConfig, workers=1),
        run_dir=tmp_path,
        embed_format="paper",
    )
    for u in bank.ids():
        c.on_write(u)
    c.run("test")
    prompts = [r.body["messages"][1]["content"] for r in stub.requests]
    assert len(prompts) == 6 and all("Unit under review (u00000" in p for p in prompts[:5])
    assert "id: u000001" in prompts[2] and "Ann: I drive a Honda Civic." in prompts[2]  # its neighbour
    assert "Units to merge (u000001, u000002)" in prompts[5]
    (target,) = [e for e in c.log.events if e["kind"] == "target"]
    assert (target["ids"], target["state"], target["new_ids"]) == (
        ["u000001", "u000002"],
        "executed",
        ["u000005"],
    )
    assert target["tokens"] > 0 and target["calls"] == 1
    assert bank.get("u000005").summary == plan["summary"] and not bank.is_visible("u000001")
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [x["phase"] for x in calls] == ["diagnose"] * 5 + ["plan_merge"]
