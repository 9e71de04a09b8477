"""The turn-level baselines on tiny hand-made dialogues: ranking, recency order, reset, budget interplay."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial

import pytest

from allmem.budget import pack
from allmem.systems import Resources
from allmem.types import SessionInfo, Turn
from baselines.bm25 import BM25
from baselines.bm25_okapi import BM25Okapi, tokenize
from baselines.full_history import FullHistory
from baselines.hybrid_rag import HybridRAG
from baselines.naive_rag import NaiveRAG

TEXTBOOK_BM25 = partial(BM25, k1=1.2, b=0.75)  # Robertson's usual constants; the fitted ones live in configs/

T0 = datetime(2023, 5, 8, 13, 56)
LINES = [
    ("Caroline", "I went to a LGBTQ support group yesterday, it was so powerful."),
    ("Melanie", "That's great! I took my kids to the museum last weekend."),
    ("Caroline", "I'm researching adoption agencies for my future family."),
    ("Melanie", "I painted a sunrise over the lake last year."),
    ("Caroline", "My guitar teacher moved to Sweden."),
]


def make_turns(prefix: str = "D1") -> list[Turn]:
    return [
        Turn(
            id=f"{prefix}:{i + 1}",
            session_id=prefix,
            speaker=s,
            text=t,
            timestamp=T0 + timedelta(minutes=i),
            order=i,
            source_id=f"{prefix}:{i + 1}",
        )
        for i, (s, t) in enumerate(LINES)
    ]


def feed(system, turns: list[Turn], dialogue_id: str = "conv-x") -> None:
    system.reset(dialogue_id)
    info = SessionInfo("S1", T0, 0)
    system.start_session(info)
    for t in turns:
        system.ingest(t)
    system.end_session(info)
    system.end_stream()


def test_tokenize_drops_stop_words() -> None:
    assert tokenize("What did Caroline do at the LGBTQ support group?") == [
        "caroline",
        "lgbtq",
        "support",
        "group",
    ]
    assert tokenize("Don't") == []  # "don" and "t" are stop words


@pytest.mark.parametrize("factory", [TEXTBOOK_BM25, BM25Okapi], ids=["bm25", "bm25_okapi"])
def test_bm25_ranks_matching_turn_first(factory) -> None:
    system = factory(k=3)
    feed(system, make_turns())
    res = system.retrieve("When did Melanie paint a sunrise?")
    assert len(res.units) == 3
    top = res.units[0]
    assert top.id == "D1:4" and top.source_ids == ("D1:4",)
    assert top.text == "Melanie: I painted a sunrise over the lake last year."
    assert top.speaker == "Melanie" and top.timestamp == T0 + timedelta(minutes=3)
    assert top.score > res.units[1].score
    assert system.retrieve("adoption agencies").units[0].id == "D1:3"


@pytest.mark.parametrize("factory", [TEXTBOOK_BM25, BM25Okapi], ids=["bm25", "bm25_okapi"])
def test_bm25_reset_clears_memory(factory) -> None:
    system = factory(k=5)
    feed(system, make_turns())
    assert len(system.retrieve("sunrise").units) == 5
    system.reset("conv-y")
    assert system.retrieve("sunrise").units == ()
    feed(system, make_turns("D9")[:3], "conv-y")  # 3 turns: with 2, Okapi idf of a 1-of-2 term is log(1) = 0
    ids = [u.id for u in system.retrieve("museum kids").units]
    assert ids[0] == "D9:2" and set(ids) == {"D9:1", "D9:2", "D9:3"}


def test_full_history_is_recency_order_and_budget_keeps_latest() -> None:
    system = FullHistory()
    feed(system, make_turns())
    res = system.retrieve("anything at all")
    assert [u.id for u in res.units] == ["D1:5", "D1:4", "D1:3", "D1:2", "D1:1"]
    assert [u.score for u in res.units] == sorted((u.score for u in res.units), reverse=True)
    two = pack(res.units, pack(res.units[:2], 10_000).used_tokens)
    assert [u.id for u in two.units] == ["D1:4", "D1:5"]  # the two most recent, chronological
    system.reset("other")
    assert system.retrieve("x").units == ()


def test_naive_rag_ranks_by_meaning(embedder) -> None:
    system = NaiveRAG(k=2, resources=Resources(embedder=embedder))
    feed(system, make_turns())
    res = system.retrieve("Which musician instructor relocated abroad?")
    assert [u.id for u in res.units][0] == "D1:5" and len(res.units) == 2
    assert res.units[0].score >= res.units[1].score
    assert set(res.timings_ms) >= {"embed", "search"}
    # turns ingested after a retrieval are embedded at the next one
    system.ingest(
        Turn(
            "D1:6",
            "D1",
            "Melanie",
            "We adopted a puppy named Oscar.",
            T0 + timedelta(hours=1),
            5,
            source_id="D1:6",
        )
    )
    assert system.retrieve("What is the name of Melanie's dog?").units[0].id == "D1:6"
    system.reset("conv-z")
    assert system.retrieve("dog").units == ()


def test_config_errors_name_the_field(embedder) -> None:
    with pytest.raises(ValueError, match=r"configs/method/bm25.yaml: k"):
        BM25(k=0, k1=1.2, b=0.75)
    with pytest.raises(ValueError, match="resources.embedder"):
        NaiveRAG()


def test_bm25_is_lucene_bm25_over_stemmed_turns_by_hand() -> None:
    """Lucene BM25 (k1 = 1.2, b = 0.75) on three turns; "adopted" and "adoption" meet in the stem "adopt"."""
    import math

    lines = [("Ann", "We adopted a dog"), ("Bob", "Adoption is hard"), ("Ann", "Nice weather today")]
    turns = [
        Turn(f"D1:{i + 1}", "D1", s, t, T0 + timedelta(minutes=i), i, source_id=f"D1:{i + 1}")
        for i, (s, t) in enumerate(lines)
    ]
    system = BM25(k=3, k1=1.2, b=0.75)
    feed(system, turns)
    # terms: [ann, adopt, dog], [bob, adopt, hard], [ann, nice, weather, today]: avgdl 10/3; df(adopt) = 2
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    expected = [idf / (1 + 1.2 * (0.25 + 0.75 * 3 / (10 / 3)))] * 2
    res = system.retrieve("adoption")
    assert [u.id for u in res.units[:2]] == ["D1:1", "D1:2"]  # equal scores: stream order
    assert [u.score for u in res.units[:2]] == pytest.approx(expected, rel=1e-6)
    assert res.units[2].score == 0.0


def test_hybrid_rag_fuses_normalised_scores(embedder) -> None:
    import numpy as np

    from allmem.memory.fusion import fuse

    system = HybridRAG(k=5, weight=0.6, k1=0.9, b=0.4, resources=Resources(embedder=embedder))
    feed(system, make_turns())
    query = "What did Melanie paint?"
    lexical = BM25(k=5, k1=0.9, b=0.4)
    feed(lexical, make_turns())
    lex = {u.id: u.score for u in lexical.retrieve(query).units}
    vecs = embedder.encode([t.render() for t in make_turns()])
    dense = vecs @ embedder.encode_one(query)
    ids = [t.id for t in make_turns()]
    expected = fuse(np.array([lex[i] for i in ids]), dense.astype("float64"), 0.6)
    res = {u.id: u.score for u in system.retrieve(query).units}
    assert [res[i] for i in ids] == pytest.approx(expected.tolist(), rel=1e-5)
    assert max(res, key=res.get) == "D1:4"
    with pytest.raises(ValueError, match="hybrid_rag.yaml: weight"):
        HybridRAG(weight=1.5, k1=1.2, b=0.75, resources=Resources(embedder=embedder))
