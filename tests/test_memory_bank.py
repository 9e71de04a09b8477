"""Memory bank: evidence immutability, typed links, the semantic cap and the incremental visible surface."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allmem.memory.bank import LINK_TYPES, BankError, EvidenceRecord, MemoryBank, evidence_hash

T0 = datetime(2023, 5, 8, 13, 56)


def _rec(i: int) -> dict:
    return {
        "speaker": "A",
        "text": f"turn {i}",
        "caption": None,
        "date": T0.isoformat(),
        "source_ids": [f"D1:{i}"],
    }


def _unit_vec(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float32)


def test_ids_are_sequential_and_embeddings_normalised() -> None:
    bank = MemoryBank(dim=3)
    a = bank.create_unit([_rec(0)], "s", ["k"], _unit_vec(3, 0, 4), T0)
    b = bank.create_unit([_rec(1)], "s", ["k"], _unit_vec(0, 2, 0), T0)
    assert (a, b) == ("u000000", "u000001")
    np.testing.assert_allclose(bank.embedding(a), [0.6, 0.0, 0.8], rtol=1e-6)
    assert bank.cosine(a, b) == pytest.approx(0.0)
    assert bank.get(a).source_ids == ("D1:0",)


def test_semantic_cap_drops_the_weakest_link() -> None:
    bank = MemoryBank(dim=2, d_sigma=2)
    hub = bank.create_unit([_rec(0)], "hub", [], _unit_vec(1, 0), T0)
    others = [bank.create_unit([_rec(i)], "x", [], _unit_vec(1, i), T0) for i in range(1, 4)]
    # cosines to hub: 1/sqrt(2)=0.707, 1/sqrt(5)=0.447, 1/sqrt(10)=0.316
    assert bank.add_link("semantic", hub, others[1]) is True
    assert bank.add_link("semantic", hub, others[2]) is True
    assert bank.add_link("semantic", hub, others[0]) is True  # strongest: evicts others[2] (0.316)
    assert {lk.dst for lk in bank.out_links(hub, "semantic")} == {others[0], others[1]}
    assert bank.add_link("semantic", hub, others[2]) is False  # the weakest new link itself is dropped
    assert not bank.has_link("semantic", hub, others[2])
    assert bank.in_links(others[2], "semantic") == []
    # other link types are uncapped
    for o in others:
        bank.add_link("temporal", hub, o)
    assert len(bank.out_links(hub, "temporal")) == 3
    bank.check_invariants()


def test_no_cap_keeps_every_semantic_link() -> None:
    bank = MemoryBank(dim=2, d_sigma=None)
    hub = bank.create_unit([_rec(0)], "hub", [], _unit_vec(1, 0), T0)
    for i in range(1, 12):
        bank.add_link("semantic", hub, bank.create_unit([_rec(i)], "x", [], _unit_vec(1, i), T0))
    assert len(bank.out_links(hub, "semantic")) == 11


def test_archive_changes_visibility_and_nothing_else() -> None:
    bank = MemoryBank(dim=2)
    ids = [bank.create_unit([_rec(i)], f"s{i}", [f"k{i}"], _unit_vec(1, i), T0) for i in range(4)]
    bank.add_link("version", ids[3], ids[1])
    bank.add_link("temporal", ids[0], ids[1])
    before = bank.get(ids[1])
    links_before = bank.links()
    bank.archive(ids[1])
    after = bank.get(ids[1])
    assert after.visible is False
    assert (after.evidence, after.summary, after.keywords, after.evidence_hash) == (
        before.evidence,
        before.summary,
        before.keywords,
        before.evidence_hash,
    )
    assert bank.links() == links_before
    np.testing.assert_array_equal(bank.embedding(ids[1]), bank.full_matrix()[1][1])
    vis_ids, mat = bank.visible_matrix()
    assert sorted(vis_ids) == [ids[0], ids[2], ids[3]]
    for uid, row in zip(vis_ids, mat, strict=True):
        np.testing.assert_array_equal(row, bank.embedding(uid))
    bank.check_invariants()


def test_set_descriptor_updates_the_surface_row() -> None:
    bank = MemoryBank(dim=2)
    a = bank.create_unit([_rec(0)], "old", ["x"], _unit_vec(1, 0), T0)
    bank.set_descriptor(a, "new", ["y", "z"], _unit_vec(0, 5))
    assert bank.get(a).descriptor_text() == "new y, z"
    np.testing.assert_allclose(bank.visible_matrix()[1][0], [0, 1])
    assert bank.changes_since(0) == [("add", a), ("descriptor", a)]


def test_rewire_copies_external_links_to_targets() -> None:
    bank = MemoryBank(dim=2, d_sigma=8)
    prev, src, nxt, s1, s2 = (bank.create_unit([_rec(i)], "x", [], _unit_vec(1, i), T0) for i in range(5))
    bank.add_link("temporal", prev, src)
    bank.add_link("temporal", src, nxt)
    bank.add_link("semantic", src, nxt)
    added = bank.rewire(src, [s1, s2])
    assert added == 6  # prev->s1, prev->s2, s1->nxt, s2->nxt (temporal) and s1->nxt, s2->nxt (semantic)
    assert bank.has_link("temporal", prev, s1) and bank.has_link("temporal", s2, nxt)
    assert bank.has_link("semantic", s1, nxt)
    assert bank.get(s1).id == s1 and bank.has_link("temporal", prev, src)  # kept by default
    bank.rewire(src, [s1], keep_original=False)
    assert not bank.has_link("temporal", prev, src) and not bank.has_link("semantic", src, nxt)
    bank.check_invariants()


def test_bad_input_is_named() -> None:
    bank = MemoryBank(dim=2)
    with pytest.raises(BankError, match="embedding"):
        bank.create_unit([_rec(0)], "s", [], np.zeros(3), T0)
    with pytest.raises(BankError, match="evidence"):
        bank.create_unit([], "s", [], np.zeros(2), T0)
    a = bank.create_unit([_rec(0)], "s", [], _unit_vec(1, 0), T0)
    with pytest.raises(BankError, match="dst"):
        bank.add_link("semantic", a, "u999999")
    with pytest.raises(BankError, match="link type"):
        bank.add_link("causal", a, a)


# ---------------------------------------------------------------- property-based: any op sequence
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.integers(0, 10**6), st.booleans()),
        st.tuples(st.just("archive"), st.integers(0, 10**6)),
        st.tuples(st.just("descriptor"), st.integers(0, 10**6), st.integers(0, 10**6)),
        st.tuples(st.just("link"), st.sampled_from(LINK_TYPES), st.integers(0, 10**6), st.integers(0, 10**6)),
        st.tuples(st.just("unlink"), st.integers(0, 10**6)),
        st.tuples(st.just("rewire"), st.integers(0, 10**6), st.integers(1, 3), st.booleans()),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(ops=_ops, d_sigma=st.integers(1, 4))
def test_any_operation_sequence_keeps_the_contracts(ops: list[tuple], d_sigma: int) -> None:
    bank = MemoryBank(dim=4, d_sigma=d_sigma)
    hashes: dict[str, str] = {}
    rng = np.random.default_rng(0)
    for op in ops:
        ids = bank.ids()
        if op[0] == "create" or not ids:
            rec = [_rec(len(ids)), _rec(op[1] if op[0] == "create" else 0)]
            uid = bank.create_unit(
                rec, "s", ["k"], rng.normal(size=4), T0, visible=op[2] if op[0] == "create" else True
            )
            hashes[uid] = evidence_hash(bank.get(uid).evidence)
            assert hashes[uid] == evidence_hash([EvidenceRecord.from_dict(d) for d in rec])
        elif op[0] == "archive":
            bank.archive(ids[op[1] % len(ids)])
        elif op[0] == "descriptor":
            bank.set_descriptor(ids[op[1] % len(ids)], f"d{op[2]}", ["x"], rng.normal(size=4))
        elif op[0] == "link":
            src, dst = ids[op[2] % len(ids)], ids[op[3] % len(ids)]
            if src != dst:
                bank.add_link(op[1], src, dst)
        elif op[0] == "unlink":
            links = bank.links()
            if links:
                lk = links[op[1] % len(links)]
                assert bank.remove_link(lk.type, lk.src, lk.dst)
        elif op[0] == "rewire":
            src = ids[op[1] % len(ids)]
            targets = [t for t in ids[-op[2] :] if t != src]
            if targets:
                bank.rewire(src, targets, keep_original=op[3])
    bank.check_invariants()
    for uid, h in hashes.items():
        assert bank.get(uid).evidence_hash == h == evidence_hash(bank.get(uid).evidence)
    for lk in bank.links():
        assert lk.src in bank and lk.dst in bank
    for uid in bank.ids():
        assert len(bank.out_links(uid, "semantic")) <= d_sigma
    vis_ids, mat = bank.visible_matrix()
    assert set(vis_ids) == {u.id for u in bank.units() if u.visible}
    for uid, row in zip(vis_ids, mat, strict=True):
        np.testing.assert_array_equal(row, bank.embedding(uid))
