"""Online write: descriptor fallback is counted, links follow stream order, batching changes nothing."""

from __future__ import annotations

import numpy as np

from allmem.defaults import paper
from allmem.embed import HashEmbedder
from allmem.memory.bank import MemoryBank
from allmem.memory.units import descriptor_text
from allmem.memory.write import OnlineWriter, WriteConfig, clean_evidence
from tests.fakes import echo_describe, failing_describe, make_turns

TEXTS = [
    "Ann loves hiking in the Alps every summer",
    "Bob bought a red bike yesterday",
    "Ann went hiking in the Alps with her sister",
    "The weather is nice today",
    "Ann plans more hiking in the Alps next summer",
    "Bob rides his red bike to work",
]


def _write(batch_turns: int, **cfg) -> tuple[MemoryBank, list[str], OnlineWriter]:
    bank = MemoryBank(dim=64, d_sigma=cfg.pop("d_sigma", 8))
    seen: list[str] = []
    w = OnlineWriter(
        bank,
        HashEmbedder(),
        None,
        paper(WriteConfig, batch_turns=batch_turns, **cfg),
        echo_describe,
        seen.append,
    )
    for t in make_turns(TEXTS):
        w.add(t)
    w.flush()
    return bank, seen, w


def test_units_carry_evidence_descriptor_and_temporal_chain() -> None:
    bank, seen, w = _write(batch_turns=4)
    assert seen == bank.ids() == [f"u{i:06d}" for i in range(6)]  # after_write once per unit, in stream order
    u = bank.get("u000002")
    assert u.evidence[0].text == TEXTS[2] and u.source_ids == ("D1:3",)
    assert (u.summary, u.keywords) == (TEXTS[2], ("Ann", "Alps"))
    assert [(lk.src, lk.dst) for lk in bank.links() if lk.type == "temporal"] == [
        (f"u{i:06d}", f"u{i + 1:06d}") for i in range(5)
    ]
    assert w.counters["units_written"] == 6 and w.counters["descriptor_failures"] == 0
    np.testing.assert_allclose(
        bank.embedding("u000002"),
        HashEmbedder().encode([descriptor_text(TEXTS[2], ("Ann", "Alps"))])[0],
        rtol=1e-6,
    )


def test_semantic_links_only_to_earlier_units_above_threshold() -> None:
    bank, _, _ = _write(batch_turns=64, sem_threshold=0.3, sem_per_insert=2)
    emb = {u: bank.embedding(u) for u in bank.ids()}
    sem = [lk for lk in bank.links() if lk.type == "semantic"]
    assert sem, "the hiking turns are similar enough to link"
    for lk in sem:
        assert lk.weight >= 0.3
        assert abs(lk.weight - float(emb[lk.src] @ emb[lk.dst])) < 1e-5
        assert bank.has_link("semantic", lk.dst, lk.src)  # both ways
    # each unit, when written, linked to at most 2 earlier units: count links from a unit to earlier ones
    for uid in bank.ids():
        assert sum(1 for lk in sem if lk.src == uid and lk.dst < uid) <= 2
    # expected neighbours of u000004 by brute force over earlier units
    earlier = [u for u in bank.ids() if u < "u000004"]
    best = sorted(earlier, key=lambda u: -float(emb["u000004"] @ emb[u]))[:2]
    expected = {u for u in best if float(emb["u000004"] @ emb[u]) >= 0.3}
    assert {lk.dst for lk in sem if lk.src == "u000004" and lk.dst < "u000004"} == expected


def test_batching_gives_the_same_bank_as_turn_by_turn() -> None:
    a, _, _ = _write(batch_turns=1, sem_threshold=0.2)
    b, _, _ = _write(batch_turns=64, sem_threshold=0.2)
    assert a.links() == b.links()
    assert [u.descriptor_text() for u in a.units()] == [u.descriptor_text() for u in b.units()]
    np.testing.assert_array_equal(a.full_matrix_view(), b.full_matrix_view())


def test_archived_units_are_not_linked_semantically() -> None:
    bank = MemoryBank(dim=64)
    w = OnlineWriter(
        bank, HashEmbedder(), None, paper(WriteConfig, batch_turns=1, sem_threshold=0.1), echo_describe
    )
    turns = make_turns(["Ann hiking Alps", "Ann hiking Alps again"])
    w.add(turns[0])
    bank.archive("u000000")
    w.add(turns[1])
    assert not bank.has_link("semantic", "u000001", "u000000")
    assert bank.has_link("temporal", "u000000", "u000001")


def test_descriptor_failure_falls_back_and_is_counted() -> None:
    bank = MemoryBank(dim=64)
    w = OnlineWriter(bank, HashEmbedder(), None, paper(WriteConfig), failing_describe)
    turn = make_turns(["  I  saw\n a   fox "], speaker="Ann")[0]
    w.add(turn)
    w.flush()
    u = bank.get("u000000")
    assert (u.summary, u.keywords) == ("Ann: I saw a fox", ())
    assert w.counters["descriptor_failures"] == 1
    assert "invalid_json" in w.failures[0]["reason"]


def test_clean_evidence_and_embed_formats() -> None:
    rec = {"speaker": "Ann", "text": "look", "caption": "a dog on a beach"}
    assert clean_evidence([rec]) == "Ann: look [image: a dog on a beach]"
    assert descriptor_text("s", ["a", "b"]) == "s a, b"
    assert descriptor_text("s", ["a", "b"], "ref") == "Keywords: a, b\n\nSummary: s"


def test_echo_describe_double_keeps_text_and_capitalised_words() -> None:
    d = echo_describe(None, [{"text": "Ann went to Paris"}])
    assert (d.summary, d.keywords) == ("Ann went to Paris", ("Ann", "Paris"))
