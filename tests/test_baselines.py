"""The three baselines on tiny hand-made dialogues: ranking, recency order, reset, budget interplay."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from allmem.budget import pack
from allmem.systems import Resources
from allmem.types import SessionInfo, Turn
from baselines.bm25 import BM25, tokenize
from baselines.full_history import FullHistory
from baselines.naive_rag import NaiveRAG

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


def test_bm25_ranks_matching_turn_first() -> None:
    system = BM25(k=3)
    feed(system, make_turns())
    res = system.retrieve("When did Melanie paint a sunrise?")
    assert len(res.units) == 3
    top = res.units[0]
    assert top.id == "D1:4" and top.source_ids == ("D1:4",)
    assert top.text == "Melanie: I painted a sunrise over the lake last year."
    assert top.speaker == "Melanie" and top.timestamp == T0 + timedelta(minutes=3)
    assert top.score > res.units[1].score
    assert system.retrieve("adoption agencies").units[0].id == "D1:3"


def test_bm25_reset_clears_memory() -> None:
    system = BM25(k=5)
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
        BM25(k=0)
    with pytest.raises(ValueError, match="resources.embedder"):
        NaiveRAG()
