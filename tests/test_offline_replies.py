"""The offline reply store (``allmem.llm.offline``, ``<cache>/llm/offline.sqlite``): a responder that declares its
inputs (``offline_inputs``) is computed once per inputs and code, its stored reply is the computed one byte for
byte, the call is booked as a fresh one, and a run's results do not depend on what the store holds."""

from __future__ import annotations

import logging
import sqlite3
from importlib import metadata
from pathlib import Path

import pytest

from allmem.cache_store import library_identity
from allmem.files import read_jsonl
from allmem.llm import LLM, build_llm
from allmem.llm.offline import OFFLINE_REPLIES, OfflineBackend, reply_key
from allmem.llm.prompts import build_request
from allmem.memory import descriptor
from allmem.memory.descriptor import Descriptor, DescriptorResponder, describe, render_evidence
from allmem.run import compare
from allmem.text.keywords import KeywordExtractor
from allmem.tokens import count_tokens
from tests.runkit import compose_and_run

EVIDENCE = [
    {"speaker": "Caroline", "text": "I went to a LGBTQ support group yesterday; it was so powerful.",
     "caption": "a photo of a rainbow flag", "date": "1:56 pm on 8 May, 2023", "source_ids": ["D1:3"]},
]  # fmt: skip


def offline_llm(tmp_path: Path, run: str = "run") -> LLM:
    cfg = {"_target_": "allmem.llm.offline.OfflineBackend", "backend": "offline", "model": "offline",
           "cache": {"enabled": False}}  # fmt: skip
    return build_llm(cfg, run_dir=tmp_path / run, cache_dir=tmp_path / "cache")


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the offline descriptor was computed (its one entry point, wrapped)."""
    calls = [0]
    real = descriptor.offline_descriptor

    def counting(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        calls[0] += 1
        return real(*a, **kw)

    monkeypatch.setattr(descriptor, "offline_descriptor", counting)
    return calls


def _request(evidence: list[dict], n_keywords: int = 12):  # noqa: ANN202
    return build_request(
        "descriptor",
        {"evidence": render_evidence(evidence), "n_keywords": str(n_keywords), "evidence_records": evidence},
        payload=DescriptorResponder(n_keywords=n_keywords),
    )


def test_a_reply_is_computed_once_per_inputs_and_booked_as_a_fresh_call(tmp_path: Path, computed) -> None:
    llm = offline_llm(tmp_path)
    first = describe(llm, EVIDENCE)
    assert isinstance(first, Descriptor) and computed[0] == 1
    assert describe(llm, EVIDENCE) == first and computed[0] == 1
    later = [EVIDENCE[0] | {"date": "9:00 am on 2 June, 2024"}]  # the same session shown again on another day
    assert describe(llm, later) == first and computed[0] == 1
    other = [EVIDENCE[0] | {"text": "I went to a pottery class yesterday."}]
    assert describe(llm, other) != first and computed[0] == 2
    # another process's client, on the same cache folder
    assert describe(offline_llm(tmp_path, "run2"), EVIDENCE) == first and computed[0] == 2
    assert (tmp_path / "cache" / OFFLINE_REPLIES).is_file()

    # booked as the same call computed without a store: the same text, the prompt's and the reply's own tokens
    bare = LLM(OfflineBackend())
    lines = read_jsonl(tmp_path / "run" / "calls.jsonl")
    assert [c["cached"] for c in lines] == [False] * 4
    served = [llm.chat(_request(e)) for e in (EVIDENCE, later, other)]  # all three from the store now
    assert computed[0] == 2
    for line, evidence in zip(lines, [EVIDENCE, EVIDENCE, later, other], strict=True):
        fresh = bare.chat(_request(evidence))
        assert line["tokens_in"] == count_tokens(_request(evidence).prompt_text) == fresh.tokens_in
        assert line["tokens_out"] == fresh.tokens_out == count_tokens(fresh.text)
        assert line["prompt_hash"] == fresh.prompt_hash
    assert [r.text for r in served] == [bare.chat(_request(e)).text for e in (EVIDENCE, later, other)]


def test_the_descriptor_reply_reads_no_date_ids_or_other_fields() -> None:
    """What makes leaving the date out of the key right: the computed reply does not change with it."""
    responder = DescriptorResponder()
    moved = [EVIDENCE[0] | {"date": "another day", "source_ids": ["D9:9"], "unit_id": 7}]
    assert responder.offline_reply(_request(moved)) == responder.offline_reply(_request(EVIDENCE))


def test_the_key_sees_the_inputs_the_code_and_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    base = reply_key(_request(EVIDENCE))
    assert base is not None and reply_key(_request(EVIDENCE)) == base
    assert reply_key(_request([EVIDENCE[0] | {"date": "another day", "source_ids": ["D9:9"]}])) == base
    assert reply_key(_request(EVIDENCE, n_keywords=4)) != base
    assert reply_key(_request([EVIDENCE[0] | {"caption": None}])) != base
    assert reply_key(_request([EVIDENCE[0] | {"speaker": "Melanie"}])) != base
    monkeypatch.setattr(descriptor, "library_identity", lambda *dists: (("yake", "0.0.1"),))
    assert reply_key(_request(EVIDENCE)) != base
    monkeypatch.undo()
    monkeypatch.setattr("allmem.cache_store.source_fingerprint", lambda roots: "edited code")
    assert reply_key(_request(EVIDENCE)) != base
    # a responder that declares no inputs is computed every time, and no store is opened for it
    assert reply_key(build_request("descriptor", {"evidence": "x", "n_keywords": "3"})) is None


def test_library_identity_follows_what_yake_requires() -> None:
    ids = dict(library_identity("yake"))
    # yake 0.7 splits sentences with segtok, which matches with regex; its scores use numpy and networkx
    assert {"yake", "segtok", "regex", "numpy", "networkx", "python", "unicode"} <= set(ids)
    assert ids["yake"] == metadata.version("yake") and ids["regex"] == metadata.version("regex")
    assert dict(library_identity("no-such-distribution-here"))["no-such-distribution-here"] == "absent"


def test_a_responder_without_declared_inputs_opens_no_store(tmp_path: Path) -> None:
    class Plain:
        def offline_reply(self, req) -> str:  # noqa: ANN001
            return '{"summary": "s", "keywords": ["k"]}'

    llm = offline_llm(tmp_path)
    res = llm.chat(build_request("descriptor", {"evidence": "[d] A: hi", "n_keywords": "3"}, payload=Plain()))
    assert res.ok and res.data == {"summary": "s", "keywords": ["k"]}
    assert not (tmp_path / "cache" / OFFLINE_REPLIES).exists()


def test_a_damaged_reply_or_store_is_computed_again(tmp_path: Path, computed, caplog) -> None:
    llm = offline_llm(tmp_path)
    first = describe(llm, EVIDENCE)
    llm.close()
    db = tmp_path / "cache" / OFFLINE_REPLIES
    with sqlite3.connect(db) as conn:  # a text whose bytes no longer match its sha256
        conn.execute('UPDATE texts SET text = \'{"summary": "tampered", "keywords": []}\'')
    with caplog.at_level(logging.WARNING):
        assert describe(offline_llm(tmp_path), EVIDENCE) == first and computed[0] == 2
    warned = [r.getMessage() for r in caplog.records if "offline reply cache" in r.getMessage()]
    assert len(warned) == 1 and str(db) in warned[0] and "sha256" in warned[0]
    assert (
        describe(offline_llm(tmp_path), EVIDENCE) == first and computed[0] == 2
    )  # replaced by the right one

    db.write_bytes(b"not a database, just bytes\n" * 300)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert describe(offline_llm(tmp_path), EVIDENCE) == first and computed[0] == 3
    warned = [r.getMessage() for r in caplog.records if "offline reply cache" in r.getMessage()]
    assert len(warned) == 1 and "moved it aside" in warned[0]
    aside = [
        p for p in db.parent.glob(f"{OFFLINE_REPLIES}.corrupt-*") if not p.name.endswith(("-wal", "-shm"))
    ]
    assert len(aside) == 1  # with its WAL side files


def test_a_store_that_cannot_be_used_is_left_alone(tmp_path: Path, computed, caplog) -> None:
    (tmp_path / "cache").write_text("a file where the cache folder should be")
    with caplog.at_level(logging.WARNING):
        llm = offline_llm(tmp_path)
        first, second = describe(llm, EVIDENCE), describe(llm, EVIDENCE)
    assert isinstance(first, Descriptor) and first == second == describe(LLM(OfflineBackend()), EVIDENCE)
    assert computed[0] == 3  # computed each time, the store left alone
    warned = [r.getMessage() for r in caplog.records if "offline reply cache" in r.getMessage()]
    assert len(warned) == 1 and "cannot be used" in warned[0]


def test_concurrent_describes_share_one_store(tmp_path: Path, computed) -> None:
    llm = offline_llm(tmp_path)
    texts = [f"I adopted puppy number {i} at the shelter." for i in range(6)]
    reqs = [_request([EVIDENCE[0] | {"text": t}]) for t in texts * 3]
    llm.max_concurrency = 4
    results = llm.chat_many(reqs)
    bare = LLM(OfflineBackend())
    assert [r.text for r in results] == [bare.chat(r).text for r in reqs]
    assert (
        6 <= computed[0] - 18 <= 18
    )  # the bare client computed 18; the store client at most once per request
    stored = computed[0]
    llm2 = offline_llm(tmp_path, "again2")
    assert [r.text for r in llm2.chat_many(reqs)] == [r.text for r in results] and computed[0] == stored


def test_a_yake_failure_that_passes_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """YAKE returns no keyphrases on any exception it catches; one that does not repeat must not decide them."""
    import yake.core.yake as yake_core

    text = "We adopted a rescue greyhound from the shelter in Leeds; the greyhound loves the beach."
    want = KeywordExtractor().phrases(text)
    assert want
    real, fails = yake_core.DataCore, [1]

    def flaky(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        if fails[0]:
            fails[0] -= 1
            raise MemoryError("transient")
        return real(*a, **kw)

    monkeypatch.setattr(yake_core, "DataCore", flaky)
    assert KeywordExtractor().phrases(text) == want and fails == [0]
    fails[0] = 5  # a failure that repeats is the text's answer, as YAKE gives it
    assert KeywordExtractor().phrases(text) == [] and fails == [3]


def test_a_run_has_the_same_result_whatever_the_store_holds(tmp_path: Path, computed) -> None:
    """allmem_noatc describes the turns allmem described: on allmem's cache it computes fewer descriptors, and its
    result is the one it gets on a cold cache (the comparison rule, ``allmem.run.compare.same_result``)."""
    cold = compose_and_run(tmp_path / "cold", "method=allmem_noatc")
    alone = computed[0]
    assert alone > 0
    warm_cache = tmp_path / "warm" / "cache"
    compose_and_run(tmp_path / "warm", "method=allmem", cache=warm_cache)
    before = computed[0]
    warm = compose_and_run(tmp_path / "warm", "method=allmem_noatc", cache=warm_cache)
    assert computed[0] - before < alone  # served from what allmem stored
    assert compare.same_result(cold, warm) == []
