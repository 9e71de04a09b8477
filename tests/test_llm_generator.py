"""LLMGenerator: the answer role through the LLM wrapper, offline (extractive) and against the stub server."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from allmem.defaults import group_node
from allmem.embed import HashEmbedder
from allmem.files import read_jsonl
from allmem.llm import build_llm
from allmem.llm.prompts import build_request
from allmem.reader.extractive import ExtractiveGenerator
from allmem.reader.llm import LLMGenerator, answer_prompt, match_option
from allmem.tokens import count_tokens
from allmem.types import AnswerRequest, Retrieved
from tests.llm_stub import StubLLM

UNITS = (
    Retrieved.of_text("D1:1", "I went to a LGBTQ support group yesterday.", ("D1:1",), 0.9,
                      datetime(2023, 5, 8, 13, 56), "Caroline"),
    Retrieved.of_text("D1:2", "I painted a sunrise over the lake.", ("D1:2",), 0.5,
                      datetime(2023, 5, 8, 13, 57), "Melanie"),
)  # fmt: skip
CONTEXT = "[8 May 2023] Caroline: I went to a LGBTQ support group yesterday.\n[8 May 2023] Melanie: I painted a sunrise."
REQ = AnswerRequest("q1", "When did Caroline go to the LGBTQ support group?", category=2, context=UNITS,
                    context_text=CONTEXT)  # fmt: skip


def test_answer_prompt_variants() -> None:
    assert answer_prompt(REQ)[0] == "answer_locomo"
    opt = AnswerRequest("q5", "Q?", category=5, options=("Not mentioned in the conversation", "Paris"))
    name, variables = answer_prompt(opt)
    assert name == "answer_locomo_options" and variables["option_b"] == "Paris"
    assert variables["context"] == "(no memories retrieved)"
    lme = AnswerRequest(
        "x", "How many days ago?", question_type="temporal-reasoning", date=datetime(2023, 5, 30, 23, 40)
    )
    name, variables = answer_prompt(lme)
    assert name == "answer_longmemeval" and variables["current_date"] == "2023/05/30 (Tue) 23:40"
    msgs = build_request(name, variables).messages
    assert "Current date: 2023/05/30 (Tue) 23:40" in msgs[-1]["content"]


def test_match_option() -> None:
    opts = ("Not mentioned in the conversation", "Paris")
    assert match_option("paris", opts) == "Paris"
    assert match_option("(a)", opts) == opts[0]
    assert match_option("b) Paris", opts) == "Paris"
    assert match_option("It was not mentioned in the conversation.", opts) == opts[0]
    assert match_option("London", opts) == "London"
    assert match_option("I pick (a) over (b)", opts) == "I pick (a) over (b)"


def test_offline_path_delegates_to_the_extractive_generator(tmp_path: Path) -> None:
    emb = HashEmbedder()
    llm = build_llm(
        {"_target_": "allmem.llm.offline.OfflineBackend", "backend": "offline", "cache": {"enabled": False}},
        run_dir=tmp_path,
        cache_dir=tmp_path,
    )
    gen = LLMGenerator(llm, embedder=emb, extractive=group_node("generator", "extractive"), max_tokens=200)
    got = gen.answer(REQ)
    want = ExtractiveGenerator(emb, **group_node("generator", "extractive")).answer(REQ)
    assert got.text == want.text and got.text  # same answer, now through the wrapper
    assert got.extra == json.loads(
        json.dumps(dict(want.extra), default=str)
    )  # extras travel as the reply's JSON
    (line,) = read_jsonl(tmp_path / "calls.jsonl")
    prompt = build_request(*answer_prompt(REQ)).prompt_text
    assert line["phase"] == "generate" and line["template"] == "answer_locomo"
    assert line["tokens_in"] == count_tokens(prompt) and got.usage["tokens_in"] == line["tokens_in"]


def test_openai_path_renders_the_prompt_and_reads_json(stub: StubLLM, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("K", "sk-x")
    llm = build_llm({"_target_": "allmem.llm.openai_backend.OpenAIBackend", "backend": "openai", "model": "gpt-4o-mini", "base_url": stub.base_url, "api_key_env": "K",
                     "backoff_base_s": 0.01, "cache": {"enabled": False}}, cache_dir=tmp_path)  # fmt: skip
    gen = LLMGenerator(llm, embedder=None, extractive={}, max_tokens=50)
    ans = gen.answer(REQ)
    assert ans.text == "Melanie: I painted a sunrise."  # the stub answers with the last memory line
    body = stub.requests[0].body
    assert body["max_tokens"] == 50 and body["response_format"] == {"type": "json_object"}
    assert "Question: When did Caroline go to the LGBTQ support group?" in body["messages"][-1]["content"]
    stub.script(("content", "The answer is (b)."))
    opt = AnswerRequest("q5", "Q?", category=5, options=("Not mentioned in the conversation", "Paris"))
    ans = gen.answer(opt)
    assert ans.text == "Paris" and ans.extra["parse_error"] == "no_json"  # prose read, flagged
    stub.script(("content", '{"answer": "b"}'))
    assert gen.answer(AnswerRequest("q6", "Q2?", category=5, options=opt.options)).text == "Paris"
