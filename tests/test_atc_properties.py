"""Property-based tests: random interleavings of online writes and Split/Merge/Update edits (some stale).

After every step: evidence never changes, no dangling link, the semantic out-degree cap holds, the visible
matrix matches visibility (``check_invariants``), every archived unit is reachable from the visible surface by
directed typed links (0% unreachable), and a target that did not execute left the bank exactly as it was.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allmem.defaults import paper
from allmem.embed import HashEmbedder
from allmem.llm import build_llm
from allmem.memory.atc import cues as tx
from allmem.memory.atc import roles as roles_mod
from allmem.memory.atc.config import ATCConfig
from allmem.memory.atc.executor import EXECUTED, Executor
from allmem.memory.atc.gate import Target
from allmem.memory.bank import MemoryBank
from allmem.memory.recover import hop_distances

SENTENCES = [
    "I went hiking at Zion.",
    "My sister is a nurse.",
    "I drive a Honda Civic.",
    "We adopted a puppy named Max.",
    "I live in Boston.",
    "I moved to Denver.",
    "Pottery calms me down.",
    "The concert was loud.",
]
T0 = datetime(2023, 1, 1)


def _split_plan(req: Any) -> dict[str, Any]:
    recs = req.variables["unit"]["evidence"]
    return {"segments": tx.sentences(recs[0]["text"]) if len(recs) == 1 else []}


def _merge_plan(req: Any) -> dict[str, Any]:
    units = req.variables["source_units"]
    return {"summary": units[0]["summary"], "keywords": [k for u in units for k in u["keywords"]]}


def _update_plan(req: Any) -> dict[str, Any]:
    cur = req.variables["current_unit"]
    return {"summary": cur["summary"], "keywords": cur["keywords"]}


def make_llm() -> Any:
    script = {"plan_split": _split_plan, "plan_merge": _merge_plan, "plan_update": _update_plan}
    return build_llm(
        {
            "_target_": "allmem.llm.scripted.ScriptedBackend",
            "backend": "scripted",
            "script": script,
            "fallback": "offline",
            "cache": {"enabled": False},
        }
    )


class World:
    """A bank plus an online writer in miniature (temporal link + 2 semantic links per write)."""

    def __init__(self, d_sigma: int) -> None:
        self.emb = HashEmbedder(dim=32)
        self.bank = MemoryBank(dim=self.emb.dim, d_sigma=d_sigma)
        self.last: str | None = None
        self.evidence: dict[str, tuple[str, Any]] = {}
        self.n = 0

    def write(self, text: str) -> None:
        vec = self.emb.encode([text])[0]
        _, mat = self.bank.visible_matrix()
        ids = self.bank.visible_ids()
        uid = self.bank.create_unit(
            [{"speaker": "Ann", "text": text, "source_ids": [f"D1:{self.n}"]}],
            f"Ann: {text}", [], vec, T0 + timedelta(minutes=self.n), order=self.n,
        )  # fmt: skip
        self.n += 1
        if self.last is not None:
            self.bank.add_link("temporal", self.last, uid)
        if ids:
            for j in np.argsort(-(mat @ vec), kind="stable")[:2]:
                self.bank.link_semantic(uid, ids[int(j)])
        self.last = uid
        u = self.bank.get(uid)
        self.evidence[uid] = (u.evidence_hash, u.evidence)

    def snapshot(self) -> tuple[Any, ...]:
        b = self.bank
        units = tuple((u.id, u.summary, u.keywords, u.visible) for u in b.units())
        return units, tuple((lk.type, lk.src, lk.dst) for lk in b.links()), b.full_matrix()[1].tobytes()

    def check(self) -> None:
        self.bank.check_invariants()
        for u in self.bank.units():
            if u.id in self.evidence:
                assert (u.evidence_hash, u.evidence) == self.evidence[u.id], f"{u.id}: evidence changed"
            else:
                self.evidence[u.id] = (u.evidence_hash, u.evidence)
        h = hop_distances(self.bank, "directed")
        unreachable = [uid for uid, d in h.items() if not math.isfinite(d)]
        assert unreachable == [], f"archived but unreachable: {unreachable}"


text_st = st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=3).map(" ".join)
step_st = st.one_of(
    st.tuples(st.just("write"), text_st),
    st.tuples(st.just("split"), st.integers(0, 40)),
    st.tuples(st.just("merge"), st.lists(st.integers(0, 40), min_size=2, max_size=4)),
    st.tuples(st.just("update"), st.tuples(st.integers(0, 40), st.integers(0, 40))),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=st.lists(text_st, min_size=3, max_size=8),
    steps=st.lists(step_st, min_size=1, max_size=14),
    d_sigma=st.integers(1, 4),
)
def test_random_edit_sequences_keep_the_invariants(
    first: list[str], steps: list[tuple], d_sigma: int
) -> None:
    w = World(d_sigma)
    for t in first:
        w.write(t)
    cfg = paper(ATCConfig, **{"support_min": 0.0})
    llm = make_llm()
    ex = Executor(w.bank, llm, w.emb, cfg, roles=roles_mod, embed_format="paper")
    for i, (kind, arg) in enumerate(steps):
        if kind == "write":
            w.write(arg)
            w.check()
            continue
        if i % 3 == 0:  # a fresh run now and then: the modified set is per run
            ex = Executor(w.bank, llm, w.emb, cfg, roles=roles_mod, embed_format="paper")
        ids = w.bank.ids()
        picks = [ids[j % len(ids)] for j in ([arg] if kind == "split" else arg)]
        before = w.snapshot()
        out = ex.run(Target(kind, tuple(picks), 0.95, picks[0]))
        if out.state != EXECUTED:
            assert w.snapshot() == before, (
                f"{kind} {picks} ended {out.state} ({out.reason}) but changed the bank"
            )
        w.check()
    assert w.bank.n_visible >= 1


def test_the_property_test_does_edit() -> None:
    """Guard against a vacuous property test: a fixed sequence executes all three operators."""
    w = World(2)
    for t in [
        "I went hiking at Zion. My sister is a nurse.",
        "I live in Boston.",
        "I live in Boston.",
        "I moved to Denver.",
    ]:
        w.write(t)
    cfg = paper(ATCConfig, **{"support_min": 0.0})
    ex = Executor(w.bank, make_llm(), w.emb, cfg, roles=roles_mod, embed_format="paper")
    states = [
        ex.run(Target("split", ("u000000",), 0.95, "u000000")).state,
        ex.run(Target("merge", ("u000001", "u000002"), 0.95, "u000001")).state,
        ex.run(Target("update", ("u000003", "u000006"), 0.95, "u000003")).state,  # u000006 is new in this run
    ]
    assert states == ["executed", "executed", "skipped"]
    ex = Executor(
        w.bank, make_llm(), w.emb, cfg, roles=roles_mod, embed_format="paper"
    )  # the next run may edit it
    assert ex.run(Target("update", ("u000003", "u000006"), 0.95, "u000003")).state == "executed"
    w.check()
    assert len(hop_distances(w.bank)) == 4  # source of the split, both merged, the superseded canonical
