"""Recoverability h(v), R(H), H_0.95 on hand-built graphs; the authors' undirected variant."""

from __future__ import annotations

import math

import numpy as np
import pytest

from allmem.memory.bank import MemoryBank
from allmem.memory.recover import hop_distances, recoverability, summarize
from tests.fakes import T0


def _bank(n: int) -> tuple[MemoryBank, list[str]]:
    bank = MemoryBank(dim=2)
    ids = [bank.create_unit([{"text": f"t{i}"}], "s", [], np.array([1.0, i]), T0) for i in range(n)]
    return bank, ids


def test_directed_hop_distances() -> None:
    # V visible; a1..a4 archived: V -ver-> a1 -sib-> a2 -temporal-> a3 ; a4 only points *to* V
    bank, (v, a1, a2, a3, a4) = _bank(5)
    bank.add_link("version", v, a1)
    bank.add_link("sibling", a1, a2)
    bank.add_link("temporal", a2, a3)
    bank.add_link("sibling", a4, v)
    for a in (a1, a2, a3, a4):
        bank.archive(a)
    h = hop_distances(bank)
    assert h == {a1: 1.0, a2: 2.0, a3: 3.0, a4: math.inf}
    rec = recoverability(bank, max_h=4)
    assert rec["n_archived"] == 4
    assert rec["unreachable_share"] == 0.25
    assert rec["median_h"] == 2.5  # sorted 1, 2, 3, inf -> mean of 2 and 3
    assert rec["h95"] is None  # a4 is never reachable
    assert rec["curve"] == {"0": 0.0, "1": 0.25, "2": 0.5, "3": 0.75, "4": 0.75}
    # the authors' variant walks only sibling/version links, both ways: a4 -sib-> V counts, a3 (temporal) does not
    ref = hop_distances(bank, "ref_undirected")
    assert ref == {a1: 1.0, a2: 2.0, a3: math.inf, a4: 1.0}


def test_summary_h95_and_median() -> None:
    h = {f"x{i}": float(1 if i < 19 else 3) for i in range(20)}  # 95% at 1 hop
    s = summarize(h, max_h=3)
    assert (s["h95"], s["median_h"], s["unreachable_share"]) == (1, 1.0, 0.0)
    assert s["curve"]["2"] == pytest.approx(0.95) and s["curve"]["3"] == 1.0
    assert summarize({}, max_h=2) == {"n_archived": 0, "unreachable_share": 0.0, "median_h": None, "h95": None,
                                      "curve": {"0": 0.0, "1": 0.0, "2": 0.0}}  # fmt: skip
    assert summarize({"a": math.inf, "b": math.inf, "c": 1.0})["median_h"] is None


def test_bad_mode_is_named() -> None:
    bank, _ = _bank(1)
    with pytest.raises(ValueError, match="recoverability mode"):
        hop_distances(bank, "bfs")
