"""LightMem's buffers and sleep-time update: extraction exactly at overflow, the cut schedule, update queues."""

from __future__ import annotations

import math

import numpy as np

from allmem.systems import Resources
from allmem.tokens import count_tokens
from baselines.lightmem import THRESHOLDS, Entry, IdfCompressor, LightMem, Message, topic_cuts
from tests.baselines_support import TableEmbedder, scripted, seen, turn


def _message(tid: str, text: str, order: int) -> Message:
    return Message(
        turn(tid, "Ana", text, order=order), text, count_tokens(text), np.zeros(4, dtype=np.float32)
    )


def test_extraction_fires_exactly_when_the_next_segment_would_overflow() -> None:
    texts = ["alpha beta gamma delta", "epsilon zeta eta theta", "iota kappa lambda mu"]
    sizes = [count_tokens(t) for t in texts]
    llm = scripted({})
    system = LightMem(
        short_term_tokens=sizes[0] + sizes[1], resources=Resources(embedder=TableEmbedder(), llm=llm)
    )
    segs = [[_message(f"D1:{i + 1}", t, i)] for i, t in enumerate(texts)]
    system.add_segments(segs[:2])
    assert seen(llm, "lightmem_extract") == [] and system.short_count == sizes[0] + sizes[1]  # full, not over
    system.add_segments(segs[2:])
    calls = seen(llm, "lightmem_extract")
    assert len(calls) == 1  # the third segment would overflow: the buffered two are extracted first
    assert [m["text"] for m in calls[0].variables["messages"]] == texts[:2]
    assert (
        "--- Topic 1 ---" in calls[0].variables["topics"]
        and "--- Topic 2 ---" in calls[0].variables["topics"]
    )
    assert system.short == [segs[2]] and system.short_count == sizes[2]
    system.add_segments([], force_extract=True)  # the stream's last turn forces the rest out
    assert len(seen(llm, "lightmem_extract")) == 2 and system.short == []
    assert [e.turn.id for e in system.entries.values()] == ["D1:1", "D1:2", "D1:3"]


def _chain(cosines: list[float]) -> np.ndarray:
    """Unit vectors in the plane whose consecutive cosines are ``cosines``."""
    angles = np.concatenate([[0.0], np.cumsum(np.arccos(cosines))])
    return np.stack([np.cos(angles), np.sin(angles)], axis=1)


def test_cut_threshold_steps_from_0_2_to_0_5() -> None:
    assert THRESHOLDS == (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5)
    assert topic_cuts(_chain([0.9, 0.1, 0.15, 0.8])) == [2, 3]  # both below 0.2: cut at the first threshold
    assert topic_cuts(_chain([0.9, 0.32, 0.6])) == [2]  # none below 0.2 .. 0.3; 0.32 < 0.35
    assert topic_cuts(_chain([0.9, 0.48, 0.44])) == [3]  # first cut appears at 0.45, only 0.44 is below it
    assert topic_cuts(_chain([0.9, 0.55])) == []  # nothing below 0.5: no cut
    assert topic_cuts(_chain([0.3])[:1]) == []


def test_sensory_buffer_cuts_when_the_next_message_would_overflow() -> None:
    system = LightMem(sensory_tokens=10, resources=Resources(embedder=TableEmbedder(), llm=scripted({})))
    vecs = _chain([0.9, 0.1, 0.9])  # a topic change between the second and the third message
    msgs = [
        Message(turn(f"D1:{i + 1}", "Ana", "w", order=i), "w", 3, np.pad(v, (0, 62)))
        for i, v in enumerate(vecs)
    ]
    assert [system.sense(m) for m in msgs[:3]] == [[], [], []]  # 9 tokens fit in 10
    segments = system.sense(
        msgs[3]
    )  # 12 > 10: cut at the topic change; the tail stays and the new one joins it
    assert segments == [msgs[:2]]
    assert system.sensory == msgs[2:]
    big = Message(turn("D1:9", "Ana", "w", order=9), "w", 11, np.pad(vecs[0], (0, 62)))
    system.sensory = []
    assert system.sense(big) == [[big]] and system.tally["oversize_messages"] == 1


def _entry(i: int, vec: list[float], text: str) -> tuple[Entry, np.ndarray]:
    return Entry(f"e{i}", text, turn(f"D1:{i + 1}", "Ana", text, order=i)), np.array(vec, dtype=np.float32)


def _with_entries(system: LightMem, pairs: list[tuple[Entry, np.ndarray]]) -> None:
    for e, v in pairs:
        system.entries[e.id] = e
        system.index.add(e.id, np.pad(v / np.linalg.norm(v), (0, system.index.dim - len(v))))


def test_sleep_update_queues_threshold_vector_and_delete() -> None:
    pairs = [
        _entry(0, [1, 0, 0], "Ana has a puppy"),
        _entry(1, [0.95, math.sqrt(1 - 0.95**2), 0], "Ana has a puppy named Biscuit"),
        _entry(2, [0.85, 0, math.sqrt(1 - 0.85**2)], "Ana walks her puppy"),
    ]
    llm = scripted({"lightmem_update": [{"action": "update", "new_memory": "Ana has a puppy, Biscuit"}]})
    system = LightMem(resources=Resources(embedder=TableEmbedder(), llm=llm))
    _with_entries(system, pairs)
    before = system.index.vector("e0").copy()
    system.sleep_update()
    queues = {e.id: [q for q, _ in e.queue] for e in system.entries.values()}
    assert queues == {"e0": [], "e1": ["e0"], "e2": ["e0", "e1"]}  # only entries not later than each one
    calls = seen(llm, "lightmem_update")
    assert len(calls) == 1  # e0 is listed by e1 at 0.95; e2 lists e0 at 0.85 and e1 at 0.81: below 0.9
    assert calls[0].variables["target"] == "Ana has a puppy"
    assert calls[0].variables["candidate_list"] == ["Ana has a puppy named Biscuit"]
    assert system.entries["e0"].text == "Ana has a puppy, Biscuit"
    assert np.array_equal(system.index.vector("e0"), before)  # the text changed, the vector did not

    llm = scripted({"lightmem_update": [{"action": "delete"}]})
    system = LightMem(resources=Resources(embedder=TableEmbedder(), llm=llm))
    _with_entries(system, pairs)
    system.sleep_update()
    assert "e0" not in system.entries and "e0" not in system.index and system.tally["update_delete"] == 1


def test_invalid_source_ids_are_skipped_and_counted() -> None:
    reply = {"data": [{"source_id": 0, "fact": "Ana likes tea"}, {"source_id": 5, "fact": "invented"},
                      {"source_id": "one", "fact": "bad"}, {"source_id": 1, "fact": ""}]}  # fmt: skip
    llm = scripted({"lightmem_extract": [reply]})
    system = LightMem(resources=Resources(embedder=TableEmbedder(), llm=llm))
    system.extract([[_message("D1:1", "tea", 0), _message("D1:2", "coffee", 1)]])
    assert [e.text for e in system.entries.values()] == ["Ana likes tea"]
    assert system.tally["skipped_invalid_source_id"] == 2 and system.tally["skipped_empty_fact"] == 1


def test_idf_compressor_keeps_the_rate_and_protected_tokens() -> None:
    comp = IdfCompressor(0.6)
    comp("the the the of of a")  # common words get a low idf
    out = comp("I met Melanie on 12 May and the dog was happy")
    toks = out.split()
    assert len(toks) >= math.ceil(0.6 * 11) and {"Melanie", "12", "May"} <= set(toks)
    assert out == " ".join(t for t in "I met Melanie on 12 May and the dog was happy".split() if t in toks)


def test_update_deletes_on_conflict_not_on_duplicate() -> None:
    from allmem.llm.prompts import load_template
    from baselines.lightmem_offline import offline_update

    # the offline role: a repeat is left alone, a contradiction deletes
    assert offline_update("Ana has a puppy", ["Ana has a puppy"]) == {"action": "ignore"}
    assert offline_update("Ana has a puppy", ["Ana no longer has a puppy"]) == {"action": "delete"}
    # the online prompt says the same (upstream's UPDATE_PROMPT deletes only on a contradiction)
    tpl = load_template("lightmem_update")
    text = " ".join(str(getattr(tpl, "user", "") or tpl).split())
    assert '"delete": only if a later fact contradicts it' in text
    assert "including when a later fact only repeats it" in text and "only repeats one of them" not in text
