"""The LLM layer without a network: templates, reply parsing, cache, ledger, limiter, offline descriptor."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from allmem.files import read_jsonl
from allmem.llm import LLMError, build_llm
from allmem.llm.base import ChatRequest
from allmem.llm.cache import ResponseCache, cache_key
from allmem.llm.ledger import Ledger, price_calls
from allmem.llm.limiter import RateLimiter
from allmem.llm.prompts import build_request, load_template, parse_reply, parse_template, template_names
from allmem.llm.roles import RoleFailure
from allmem.memory.descriptor import Descriptor, DescriptorResponder, describe, render_evidence
from allmem.tokens import count_tokens
from allmem.types import CallRecord

EVIDENCE = [
    {
        "speaker": "Caroline",
        "text": "  I went to a LGBTQ support group   yesterday and it was so powerful. ",
        "caption": "a photo of a rainbow flag",
        "date": "1:56 pm on 8 May, 2023",
        "source_ids": ["D1:3"],
    }
]


def offline_llm(tmp_path: Path, **over) -> object:
    cfg = {
        "_target_": "allmem.llm.offline.OfflineBackend",
        "backend": "offline",
        "model": "offline",
        "cache": {"enabled": False},
    } | over
    return build_llm(cfg, run_dir=tmp_path / "run", cache_dir=tmp_path / "cache")


# ---------------------------------------------------------------- templates


def test_every_template_parses_and_documents_its_variables() -> None:
    names = template_names()
    assert "descriptor" in names
    for name in names:
        tpl = load_template(name)
        assert tpl.version and tpl.phase
        for var in tpl.variables:  # each placeholder is documented in the header
            assert f"{var}:" in tpl.header, f"{name}: variable {var} undocumented"
        if tpl.schema is not None:
            assert tpl.schema.get("type") == "object"


def test_template_render_and_errors(tmp_path: Path) -> None:
    bad = tmp_path / "broken.txt"
    bad.write_text("# name: broken\n# phase: write\n@@ user\nhi {{x}}\n")
    with pytest.raises(ValueError, match=r"broken.txt.*version"):
        parse_template(bad)
    good = tmp_path / "hello.txt"
    good.write_text(
        '# name: hello\n# version: 3\n# phase: judge\n# variables:\n#   x: a thing\n@@ user\nSay {"a": {{x}}}\n'
    )
    tpl = parse_template(good)
    assert tpl.render({"x": "1"}) == ({"role": "user", "content": 'Say {"a": 1}'},)
    with pytest.raises(KeyError, match=r"hello.txt.*x"):
        tpl.render({})


def test_descriptor_request_carries_template_version_and_schema() -> None:
    req = build_request("descriptor", {"evidence": "[d] A: b", "n_keywords": "5"})
    assert req.phase == "write" and req.template == "descriptor"
    assert req.template_version == load_template("descriptor").version
    assert req.json_schema is not None and "[d] A: b" in req.messages[-1]["content"]
    with pytest.raises(ValueError, match="phase"):
        ChatRequest(
            phase="nope", template="t", template_version="1", messages=({"role": "user", "content": "x"},)
        )


# ---------------------------------------------------------------- parsing


SCHEMA = {
    "type": "object",
    "required": ["summary", "keywords"],
    "properties": {
        "summary": {"type": "string", "minLength": 1},
        "keywords": {"type": "array", "items": {"type": "string"}},
    },
}


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("no json at all", "no_json"),
        ('{"summary": "x", "keywords": [}', "invalid_json"),
        ('{"summary": "x"}', "schema"),
        ('{"summary": "", "keywords": []}', "schema"),
        ('{"summary": "x", "keywords": [1]}', "schema"),
    ],
)
def test_bad_replies_become_typed_failures(text: str, kind: str) -> None:
    data, failure = parse_reply(text, SCHEMA)
    assert data is None and failure is not None and failure.kind == kind and failure.raw == text


def test_fenced_and_wrapped_json_is_read() -> None:
    data, failure = parse_reply('Sure!\n```json\n{"summary": "s", "keywords": ["k"]}\n```', SCHEMA)
    assert failure is None and data == {"summary": "s", "keywords": ["k"]}
    data, failure = parse_reply('Here: {"summary": "s", "keywords": []} done', SCHEMA)
    assert failure is None and data["summary"] == "s"


# ---------------------------------------------------------------- offline descriptor


def test_offline_descriptor_cleans_evidence_and_extracts_keywords(tmp_path: Path) -> None:
    llm = offline_llm(tmp_path)
    d = describe(llm, EVIDENCE)
    assert isinstance(d, Descriptor)
    assert d.summary == (
        "Caroline: I went to a LGBTQ support group yesterday and it was so powerful. [image: a photo of a rainbow flag]"
    )
    assert d.keywords[0] == "Caroline"  # the speaker is a name the question will use
    assert "LGBTQ support group" in d.keywords and "yesterday" in d.keywords and "rainbow flag" in d.keywords
    assert d.text().startswith(d.summary)


def test_offline_descriptor_keeps_numbers_dates_and_names(tmp_path: Path) -> None:
    llm = offline_llm(tmp_path)
    rec = {"speaker": "Melanie", "text": "We moved from Sweden 4 years ago; on 7 May 2023 I met John Smith and paid $300.",
           "caption": None, "date": "8 May 2023", "source_ids": ["D2:1"]}  # fmt: skip
    d = describe(llm, [rec])
    assert isinstance(d, Descriptor)
    for kw in ("Melanie", "Sweden", "John Smith", "4 years ago", "7 May 2023", "$300"):
        assert any(kw in k for k in d.keywords), (kw, d.keywords)  # possibly inside a longer keyphrase


def test_offline_descriptor_joins_several_records_and_fails_on_none(tmp_path: Path) -> None:
    llm = offline_llm(tmp_path)
    recs = [
        {"speaker": "A", "text": "I adopted a puppy.", "caption": None, "date": "d1", "source_ids": ["D1:1"]},
        {"speaker": "B", "text": "Her name is Luna.", "caption": None, "date": "d1", "source_ids": ["D1:2"]},
    ]
    d = describe(llm, recs)
    assert isinstance(d, Descriptor) and d.summary == "A: I adopted a puppy. B: Her name is Luna."
    empty = describe(llm, [])
    assert isinstance(empty, RoleFailure) and not empty and empty.kind == "empty"


def test_offline_calls_are_booked_with_real_token_counts(tmp_path: Path) -> None:
    llm = offline_llm(tmp_path)
    describe(llm, EVIDENCE)
    (line,) = read_jsonl(tmp_path / "run" / "calls.jsonl")
    rendered = render_evidence(EVIDENCE)
    assert rendered == ("[1:56 pm on 8 May, 2023] Caroline:   I went to a LGBTQ support group   yesterday and it was "
                        "so powerful. [image: a photo of a rainbow flag]")  # fmt: skip
    req = build_request("descriptor", {"evidence": rendered, "n_keywords": "12"})
    assert line["phase"] == "write" and line["backend"] == "offline" and line["estimated"] is True
    assert line["tokens_in"] == count_tokens(req.prompt_text)
    assert line["tokens_out"] > 10 and line["template"] == "descriptor"
    totals = llm.totals()
    assert totals["write"]["calls"] == 1 and totals["all"]["tokens_in"] == line["tokens_in"]


# ---------------------------------------------------------------- cache


def test_cache_key_covers_every_input() -> None:
    base = {"backend": "openai", "model": "m", "messages": [{"role": "user", "content": "x"}],
            "params": {"temperature": 0.0}, "template": "t", "template_version": "1"}  # fmt: skip
    k0 = cache_key(**base)
    for field, value in [("backend", "replay"), ("model", "m2"), ("messages", [{"role": "user", "content": "y"}]),
                         ("params", {"temperature": 0.5}), ("template", "u"), ("template_version", "2")]:  # fmt: skip
        assert cache_key(**(base | {field: value})) != k0, field
    assert cache_key(**base) == k0


def test_offline_cache_hit_is_flagged_and_counted(tmp_path: Path) -> None:
    llm = offline_llm(tmp_path, cache={"enabled": True, "path": "c.sqlite"})
    first, second = describe(llm, EVIDENCE), describe(llm, EVIDENCE)
    assert first == second
    lines = read_jsonl(tmp_path / "run" / "calls.jsonl")
    assert [c["cached"] for c in lines] == [False, True]
    assert lines[0]["prompt_hash"] == lines[1]["prompt_hash"]
    assert llm.cache.stats() == {"write": {"hits": 1, "misses": 1}}
    other = offline_llm(tmp_path, cache={"enabled": True, "path": "c.sqlite"})  # another process's client
    assert describe(other, EVIDENCE) == first and other.cache.stats() == {"write": {"hits": 1, "misses": 0}}


def test_cache_is_shared_by_threads(tmp_path: Path) -> None:
    from allmem.llm.cache import CachedReply

    cache = ResponseCache(tmp_path / "c.sqlite")
    errors: list[Exception] = []

    def work(i: int) -> None:
        try:
            for j in range(20):
                cache.put(
                    f"k{j}",
                    phase="write",
                    template="t",
                    backend="b",
                    model="m",
                    reply=CachedReply(str(j), 1, 2),
                )
                assert cache.get(f"k{j}", "write") == CachedReply(str(j), 1, 2)
        except Exception as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cache) == 20
    cache.close()


# ---------------------------------------------------------------- ledger and prices


def test_ledger_totals_and_prices_by_hand(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "calls.jsonl")
    ledger.record(CallRecord("generate", "openai", "gpt-4o-mini", 1000, 10, 5.0, False, "h1"))
    ledger.record(CallRecord("generate", "openai", "gpt-4o-mini", 1000, 10, 1.0, True, "h1"))
    ledger.record(CallRecord("judge", "openai", "gpt-4o", 200, 2, 3.0, False, "h2", ok=False))
    t = ledger.totals()
    assert t["generate"]["calls"] == 2 and t["generate"]["cached"] == 1
    assert t["generate"]["tokens_in"] == 2000 and t["generate"]["spent_tokens_in"] == 1000
    assert t["judge"]["failed"] == 1 and t["all"]["calls"] == 3 and t["all"]["tokens_out"] == 22
    prices = {"gpt-4o-mini": {"input_per_mtok": 0.15, "output_per_mtok": 0.6},
              "gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10.0}}  # fmt: skip
    cost = price_calls(read_jsonl(tmp_path / "calls.jsonl"), prices)
    mini = (1000 * 0.15 + 10 * 0.6) / 1e6
    judge = (200 * 2.5 + 2 * 10.0) / 1e6
    assert cost["usd"] == pytest.approx(mini + judge)
    assert cost["usd_uncached"] == pytest.approx(2 * mini + judge)


# ---------------------------------------------------------------- limiter


def test_limiter_paces_requests_and_tokens() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    lim = RateLimiter(rpm=2, tpm=100, clock=lambda: now[0], sleep=sleep)
    lim.acquire(10)
    lim.acquire(10)
    lim.acquire(10)  # third request in the minute waits for the first to leave the window
    assert slept == [60.0]
    now[0] = 200.0
    lim.acquire(90)
    lim.acquire(20)  # 90 + 20 > 100 tokens: waits until the 90 leave
    assert slept[-1] == pytest.approx(60.0)


# ---------------------------------------------------------------- config


def test_build_llm_rejects_bad_config(tmp_path: Path) -> None:
    with pytest.raises(
        LLMError, match=r"llm\._target_: 'allmem.llm.gpt.Backend' is not an importable backend"
    ):
        build_llm({"_target_": "allmem.llm.gpt.Backend", "backend": "gpt"}, cache_dir=tmp_path)
    with pytest.raises(LLMError, match=r"llm\.model: required for backend openai"):
        build_llm(
            {"_target_": "allmem.llm.openai_backend.OpenAIBackend", "backend": "openai"}, cache_dir=tmp_path
        )
    with pytest.raises(LLMError, match=r"llm\.temprature"):
        build_llm(
            {"_target_": "allmem.llm.offline.OfflineBackend", "backend": "offline", "temprature": 0},
            cache_dir=tmp_path,
        )
    with pytest.raises(LLMError, match=r"llm\.base_url"):
        build_llm(
            {
                "_target_": "allmem.llm.openai_backend.OpenAIBackend",
                "backend": "openai",
                "model": "m",
                "base_url": "",
                "api_key_env": "X",
            },
            cache_dir=tmp_path,
        )
    with pytest.raises(LLMError, match="cache"):
        build_llm(
            {
                "_target_": "allmem.llm.openai_backend.ReplayBackend",
                "backend": "replay",
                "model": "m",
                "cache": {"enabled": False},
            },
            cache_dir=tmp_path,
        )


def test_shipped_configs_build(tmp_path: Path, repo_root: Path) -> None:
    from omegaconf import OmegaConf

    for name in ("offline", "openai", "replay"):
        cfg = OmegaConf.load(repo_root / "configs" / "llm" / f"{name}.yaml")
        llm = build_llm(cfg, cache_dir=tmp_path)
        assert llm.backend_name == name
        assert "key" not in json.dumps(llm.describe()).replace("api_key_env", "")
        llm.close()


def test_dry_run_estimates_without_calling(tmp_path: Path) -> None:
    llm = offline_llm(tmp_path, dry_run=True, model="gpt-4o-mini", backend="offline")
    d = describe(llm, EVIDENCE)
    assert isinstance(d, Descriptor)  # the offline role keeps the pipeline going
    (line,) = read_jsonl(tmp_path / "run" / "calls.jsonl")
    assert line["dry_run"] is True and line["estimated"] is True and line["model"] == "gpt-4o-mini"
    assert not llm.can_judge


def test_price_run_reads_the_run_config(tmp_path: Path) -> None:
    from allmem.llm.ledger import price_run

    (tmp_path / "config.yaml").write_text(
        "llm:\n  prices:\n    gpt-4o-mini: {input_per_mtok: 0.15, output_per_mtok: 0.60}\n"
    )
    Ledger(tmp_path / "calls.jsonl").record(
        CallRecord("generate", "openai", "gpt-4o-mini", 2_000_000, 1_000_000, 1, False, "h")
    )
    Ledger(tmp_path / "calls.jsonl").record(
        CallRecord("write", "offline", "offline", 100, 10, 1, False, "h2")
    )
    cost = price_run(tmp_path)
    assert cost["usd"] == pytest.approx(2 * 0.15 + 0.60) and cost["unpriced_models"] == ["offline"]


def _write_keys(path: str, worker: int) -> None:
    from allmem.llm.cache import CachedReply

    cache = ResponseCache(path)
    for j in range(30):
        cache.put(
            f"k{j}", phase="write", template="t", backend="b", model="m", reply=CachedReply(f"v{j}", j, 1)
        )
        cache.put(
            f"w{worker}-{j}",
            phase="write",
            template="t",
            backend="b",
            model="m",
            reply=CachedReply("x", 1, 1),
        )
    cache.close()


def test_cache_is_shared_by_processes(tmp_path: Path) -> None:
    import multiprocessing

    from allmem.llm.cache import CachedReply

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_keys, args=(str(tmp_path / "c.sqlite"), w)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    cache = ResponseCache(tmp_path / "c.sqlite")
    assert len(cache) == 30 + 3 * 30  # shared keys once (INSERT OR IGNORE), each worker's own keys
    assert cache.get("k7", "write") == CachedReply("v7", 7, 1)


def test_keywords_drop_chat_fillers_and_sentence_start_words() -> None:
    from allmem.text.keywords import KeywordExtractor

    kw = KeywordExtractor()(
        "Wow, Painting is fun! Hey Mel, I saw one with John at the Perseid meteor shower.", ["Caroline"]
    )
    assert kw[0] == "Caroline" and "Mel" in kw and "John" in kw
    assert not {"Wow", "Hey", "Hey Mel", "one with"} & set(kw)
    assert any("Perseid meteor shower" in k for k in kw)


def test_chat_many_keeps_request_order(tmp_path: Path) -> None:
    llm = offline_llm(tmp_path, max_concurrency=3)
    texts = [f"Item number {i} is a {w}." for i, w in enumerate(["cat", "dog", "lamp", "car", "tree"])]
    reqs = [
        build_request(
            "descriptor",
            {"evidence": t, "n_keywords": "4", "evidence_records": [{"speaker": "A", "text": t}]},
            payload=DescriptorResponder(n_keywords=4),
        )
        for t in texts
    ]
    results = llm.chat_many(reqs)
    assert [r.data["summary"] for r in results] == [f"A: {t}" for t in texts]
    assert llm.totals()["write"]["calls"] == 5


def test_offline_backend_asks_the_payload_and_names_a_missing_responder(tmp_path: Path) -> None:
    """No module paths in the LLM layer: a request without a responder fails with the template named."""
    llm = offline_llm(tmp_path)
    bare = build_request("descriptor", {"evidence": "[d] A: hi", "n_keywords": "3"})
    with pytest.raises(LLMError, match="'descriptor' carries no offline responder"):
        llm.chat(bare)
    records = [{"speaker": "A", "text": "I adopted a puppy named Luna."}]
    req = build_request(
        "descriptor", {"evidence": "[d] A: hi", "n_keywords": "3", "evidence_records": records},
        payload=DescriptorResponder(n_keywords=3),
    )  # fmt: skip
    res = llm.chat(req)
    assert (
        res.ok
        and res.data["summary"] == "A: I adopted a puppy named Luna."
        and len(res.data["keywords"]) <= 3
    )
