"""Mem0's update mechanism: temporary integer ids, UPDATE keeps the id and unions sources, unknown ids counted."""

from __future__ import annotations

import json

from allmem.systems import Resources
from baselines.mem0 import Mem0, Mem0Responder, offline_facts
from tests.baselines_support import TableEmbedder, add_session, feed, scripted, seen, sessions, turn

DIALOGUE = sessions(
    [("D1:1", "Ana", "I adopted a puppy named Biscuit."), ("D1:2", "Ben", "Nice!")],
    [("D2:1", "Ana", "Biscuit finished his first puppy class."), ("D2:2", "Ben", "Cool.")],
    [("D3:1", "Ana", "I gave Biscuit to my sister."), ("D3:2", "Ben", "Oh no.")],
)


def test_update_keeps_id_unions_sources_and_skips_invented_ids() -> None:
    empty = {"facts": []}
    llm = scripted(
        {
            # stores in order of first appearance (Ana, Ben); one extraction per batch and store
            "mem0_extract": [
                {"facts": ["Ana adopted a puppy named Biscuit"]}, empty,
                {"facts": ["Ana's puppy Biscuit finished puppy class"]}, empty,
                {"facts": ["Ana gave Biscuit away", "Ana likes hiking"]}, empty,
            ],
            "mem0_update": [
                {"memory": [{"id": "0", "text": "Ana adopted a puppy named Biscuit", "event": "ADD"}]},
                {"memory": [
                    {"id": "0", "text": "Ana adopted Biscuit, who finished puppy class", "event": "UPDATE",
                     "old_memory": "Ana adopted a puppy named Biscuit"},
                    {"id": "7", "text": "invented", "event": "UPDATE"},
                    {"id": "0", "text": "whatever", "event": "NONE"},
                ]},
                {"memory": [
                    {"id": "0", "text": "Ana adopted Biscuit, who finished puppy class", "event": "DELETE"},
                    {"id": "7", "text": "invented", "event": "DELETE"},
                    {"id": "x", "text": "Ana likes hiking", "event": "ADD"},
                    {"id": "0", "text": "bad", "event": "MERGE"},
                ]},
            ],
        }
    )  # fmt: skip
    system = Mem0(resources=Resources(embedder=TableEmbedder(), llm=llm))
    feed(system, DIALOGUE[:2], end=False)
    ana = system.stores["Ana"]
    assert list(ana.memories) == ["Ana:0"]
    mem = ana.memories["Ana:0"]
    assert mem.text == "Ana adopted Biscuit, who finished puppy class"
    assert mem.sources == ("D1:1", "D2:1")  # the id survived the UPDATE, the sources were unioned
    updates = seen(llm, "mem0_update")
    assert updates[1].variables["old_memory"] == [{"id": "0", "text": "Ana adopted a puppy named Biscuit"}]
    assert system.tally["skipped_unknown_id"] == 1

    add_session(system, DIALOGUE[2], 2)  # third session: DELETE, an invented id, ADD, an unknown event
    assert list(ana.memories) == ["Ana:1"] and ana.memories["Ana:1"].text == "Ana likes hiking"
    assert ana.memories["Ana:1"].sources == ("D3:1",)
    assert len(ana.index) == 1
    stats = system.stats()
    assert stats["skipped_unknown_id"] == 2 and stats["skipped_invalid_event"] == 1
    assert stats["event_ADD"] == 2 and stats["event_UPDATE"] == 1 and stats["event_DELETE"] == 1
    assert stats["memories"] == 1
    assert "calls_mem0_update" in stats and stats["calls_mem0_extract"] == 6


def test_each_fact_is_shown_at_most_five_neighbours_and_bad_json_is_counted() -> None:
    llm = scripted({})  # the offline roles: every distinct fact is ADDed
    system = Mem0(batch_size=1, resources=Resources(embedder=TableEmbedder(), llm=llm))
    texts = [f"Ana owns item number {w} of the red collection" for w in "abcdefgh"]
    feed(
        system, [[turn(f"D1:{i + 1}", "Ana", x, minutes=i, order=i) for i, x in enumerate(texts)]], end=False
    )
    last = seen(llm, "mem0_update")[-1]
    assert len(last.variables["facts"]) == 1 and len(last.variables["old_memory"]) == 5
    assert [m["id"] for m in last.variables["old_memory"]] == ["0", "1", "2", "3", "4"]

    bad = scripted({"mem0_update": ["not json at all", '{"memory": [{"id": 0,, }]}']})
    system = Mem0(resources=Resources(embedder=TableEmbedder(), llm=bad))
    feed(system, DIALOGUE[:2])
    assert system.stats()["failed_mem0_update_no_json"] == 1
    assert system.stats()["failed_mem0_update_invalid_json"] == 1
    assert system.stats()["memories"] == 0  # both update replies were unusable: nothing was written


def test_offline_roles() -> None:
    records = [
        {"role": "user", "speaker": "Ana", "text": "Wow! I adopted a puppy. How are you?"},
        {"role": "assistant", "speaker": "Ben", "text": "I run marathons."},
    ]
    assert offline_facts(records) == ["Ana adopted a puppy."]
    pins = {"Ana likes tea": [1, 0], "Ana enjoys tea": [0.96, 0.28], "Ana drinks coffee": [0.85, 0.527],
            "Ben runs": [0, 1]}  # fmt: skip
    emb = TableEmbedder(pins)
    r = Mem0Responder(0.95, 0.8, vectors={k: emb.table[k] for k in pins})
    old = [{"id": "0", "text": "Ana likes tea"}]
    assert [x["event"] for x in r.decide(old, ["Ana enjoys tea"])] == ["NONE"]  # cosine 0.96 >= 0.95
    assert [x["event"] for x in r.decide(old, ["Ben runs"])] == ["ADD", "NONE"]
    # 0.85 with no change cue and not all of the memory's words: a new memory
    assert [x["event"] for x in r.decide(old, ["Ana drinks coffee"])] == ["ADD", "NONE"]
    near, far = emb.table["Ana likes tea"], emb.table["Ana drinks coffee"]  # cosine 0.85
    r2 = Mem0Responder(
        0.95,
        0.8,
        vectors={"Ana has a dog": near, "Ana no longer has a dog": far, "Ana has a dog named Rex": far},
    )
    old = [{"id": "0", "text": "Ana has a dog"}]
    assert [x["event"] for x in r2.decide(old, ["Ana no longer has a dog"])] == ["DELETE", "ADD"]
    upd = r2.decide(old, ["Ana has a dog named Rex"])
    assert upd == [
        {"id": "0", "text": "Ana has a dog named Rex", "event": "UPDATE", "old_memory": "Ana has a dog"}
    ]
    assert json.loads(json.dumps(upd)) == upd
