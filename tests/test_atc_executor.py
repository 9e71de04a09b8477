"""The executor and its fail-closed behaviour, driven through the scripted LLM backend (a first-class fake).

Each case scripts the diagnosis to propose one target and scripts the planner's reply; the bank must change
exactly as the operator says when the plan is valid, and not at all when the target ends Skipped or Noop.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from allmem.defaults import paper
from allmem.embed import HashEmbedder
from allmem.llm import build_llm
from allmem.memory.atc.config import ATCConfig
from allmem.memory.atc.consolidator import build_consolidator
from allmem.memory.bank import MemoryBank
from tests.fakes import ATC_TEXTS as TEXTS
from tests.fakes import make_bank


def snapshot(bank: MemoryBank) -> tuple[Any, ...]:
    units = tuple((u.id, u.evidence_hash, u.summary, u.keywords, u.visible, u.order) for u in bank.units())
    links = tuple((lk.type, lk.src, lk.dst, round(lk.weight, 6)) for lk in bank.links())
    return units, links, bank.full_matrix()[1].tobytes(), tuple(sorted(bank.visible_ids()))


def run_atc(bank: MemoryBank, proposals: list[dict[str, Any]], script: dict[str, Any], tmp_path, **cfg: Any):
    """One consolidation run where the diagnosis of u000004 returns ``proposals`` (others: none)."""

    def diagnose(req: Any) -> dict[str, Any]:
        return {"proposals": proposals if req.variables["target_id"] == "u000004" else []}

    llm = build_llm(
        {
            "_target_": "allmem.llm.scripted.ScriptedBackend",
            "backend": "scripted",
            "script": {"diagnose": diagnose, **script},
            "fallback": "offline",
            "cache": {"enabled": False},
        }
    )
    c = build_consolidator(
        bank=bank,
        llm=llm,
        embedder=HashEmbedder(dim=64),
        cfg=paper(ATCConfig, **{"workers": 2, **cfg}),
        embed_format="paper",
        run_dir=tmp_path,
        dialogue_id="d",
    )
    for u in bank.ids():
        c.on_write(u)
    c.run("test")
    return [e for e in c.log.events if e["kind"] == "target"], c


# ---------------------------------------------------------------- executed edits


def test_merge_executes_with_lineage(tmp_path) -> None:
    bank = make_bank()
    hashes = {u.id: u.evidence_hash for u in bank.units()}
    plan = {"summary": "Ann drives a Honda Civic.", "keywords": ["Honda Civic", "Ann"]}
    events, _ = run_atc(
        bank, [{"op": "merge", "target": ["u000002", "1"], "p": 0.95}], {"plan_merge": [plan]}, tmp_path
    )
    assert [(e["op"], e["ids"], e["state"]) for e in events] == [
        ("merge", ["u000001", "u000002"], "executed")
    ]
    canon = bank.get("u000005")
    assert events[0]["new_ids"] == ["u000005"] and events[0]["source_ids"] == {
        "u000001": ["D1:2"],
        "u000002": ["D1:3"],
    }
    assert [r.text for r in canon.evidence] == [TEXTS[1], TEXTS[2]] and canon.source_ids == ("D1:2", "D1:3")
    assert canon.summary == plan["summary"] and canon.keywords == ("Honda Civic", "Ann") and canon.visible
    assert not bank.is_visible("u000001") and not bank.is_visible("u000002")
    assert bank.has_link("version", "u000005", "u000001") and bank.has_link("version", "u000005", "u000002")
    # external links rewired: the temporal predecessor of u000001 now also points to the canonical unit
    assert bank.has_link("temporal", "u000000", "u000005") and bank.has_link("temporal", "u000005", "u000003")
    assert {u.id: u.evidence_hash for u in bank.units() if u.id in hashes} == hashes
    bank.check_invariants()


def test_split_executes_with_siblings(tmp_path) -> None:
    bank = make_bank()
    segs = ["I went hiking at Zion on Saturday.", "My sister  works as a nurse."]
    events, _ = run_atc(
        bank,
        [{"op": "split", "target": ["u000000"], "p": 0.97}],
        {"plan_split": [{"segments": segs}]},
        tmp_path,
    )
    assert [e["state"] for e in events] == ["executed"]
    a, b = events[0]["new_ids"]
    assert [bank.get(a).evidence[0].text, bank.get(b).evidence[0].text] == [
        segs[0],
        "My sister works as a nurse.",
    ]
    assert bank.get(a).source_ids == ("D1:1",) and bank.get(a).summary.startswith("Ann: I went hiking")
    for x, y in ((a, b), (b, a), (a, "u000000"), (b, "u000000")):
        assert bank.has_link("sibling", x, y)
    assert not bank.is_visible("u000000")
    assert bank.has_link("temporal", a, "u000001") and bank.has_link("temporal", b, "u000001")
    bank.check_invariants()


def test_split_segments_copied_with_the_line_prefix_are_grounded(tmp_path) -> None:
    bank = make_bank()
    segs = [
        "[2023-05-08T13:00:00] Ann: I went hiking at Zion on Saturday.",
        "Ann: My sister works as a nurse.",
    ]
    events, _ = run_atc(
        bank,
        [{"op": "split", "target": ["u000000"], "p": 0.97}],
        {"plan_split": [{"segments": segs}]},
        tmp_path,
    )
    assert events[0]["state"] == "executed"
    texts = [bank.get(n).evidence[0].text for n in events[0]["new_ids"]]
    assert texts == ["I went hiking at Zion on Saturday.", "My sister works as a nurse."]


def test_update_executes_and_refreshes_the_descriptor(tmp_path) -> None:
    bank = make_bank()
    plan = {"summary": "Ann moved to Denver and no longer lives in Boston.", "keywords": ["Denver"]}
    events, _ = run_atc(
        bank,
        [{"op": "update", "target": ["u000004", "u000003"], "p": 0.99}],
        {"plan_update": [plan]},
        tmp_path,
    )
    assert [e["state"] for e in events] == ["executed"] and events[0]["new_ids"] == []
    assert bank.get("u000004").summary == plan["summary"] and bank.get("u000004").visible
    assert np.allclose(
        bank.embedding("u000004"), HashEmbedder(dim=64).encode([plan["summary"] + " Denver"])[0]
    )
    assert bank.has_link("version", "u000004", "u000003") and not bank.is_visible("u000003")
    assert len(bank) == len(TEXTS)


def test_an_executed_edit_line_holds_its_units_before_and_after(tmp_path) -> None:
    """Records version 2: the line alone shows what Update changed (Table 8 and Fig. 7 read only it)."""
    bank = make_bank()
    old_summary = bank.get("u000004").summary
    plan = {"summary": "Ann moved to Denver and no longer lives in Boston.", "keywords": ["Denver"]}
    (event,), _ = run_atc(bank, UPDATE, {"plan_update": [plan]}, tmp_path)
    before, after = {u["id"]: u for u in event["before"]}, {u["id"]: u for u in event["after"]}
    assert list(before) == list(after) == ["u000004", "u000003"]
    assert before["u000004"]["summary"] == old_summary and after["u000004"]["summary"] == plan["summary"]
    assert after["u000004"]["keywords"] == ["Denver"]
    assert before["u000003"]["visible"] and not after["u000003"]["visible"] and after["u000004"]["visible"]
    assert [r["text"] for r in after["u000003"]["evidence"]] == [TEXTS[3]]
    assert after["u000003"]["evidence"][0]["source_ids"] == ["D1:4"]
    assert after["u000004"]["date"] == bank.get("u000004").timestamp.isoformat()
    assert event["links"] == [["version", "u000004", "u000003"]]


def test_a_skipped_edit_line_holds_no_units(tmp_path) -> None:
    bank = make_bank()
    (event,), _ = run_atc(bank, UPDATE, {"plan_update": [{"decline": True, "reason": "no"}]}, tmp_path)
    assert event["state"] != "executed" and "before" not in event and "after" not in event


# ---------------------------------------------------------------- fail-closed


MERGE = [{"op": "merge", "target": ["u000001", "u000002"], "p": 0.95}]
UPDATE = [{"op": "update", "target": ["u000004", "u000003"], "p": 0.95}]
SPLIT = [{"op": "split", "target": ["u000000"], "p": 0.95}]


@pytest.mark.parametrize(
    ("proposals", "script", "state", "reason"),
    [
        (MERGE, {"plan_merge": ['{"summary": "x" "keywords": []}']}, "skipped", "invalid_json"),
        (MERGE, {"plan_merge": ["no json at all"]}, "skipped", "no_json"),
        (MERGE, {"plan_merge": [{"summary": "Ann drives a Honda Civic."}]}, "skipped", "missing field 'keywords'"),
        (UPDATE, {"plan_update": [{"keywords": ["Denver"]}]}, "skipped", "missing field 'summary'"),
        (MERGE, {"plan_merge": [{"summary": "   ", "keywords": ["x"]}]}, "skipped", "empty descriptor"),
        (UPDATE, {"plan_update": [{"summary": "", "keywords": []}]}, "skipped", "empty descriptor"),
        (MERGE, {"plan_merge": [{"summary": "Quantum chromodynamics lectures", "keywords": []}]}, "skipped", "unsupported"),
        (MERGE, {"plan_merge": [{"summary": "x", "keywords": [], "decline": True}]}, "noop", "declined"),
        (UPDATE, {"plan_update": [{"summary": "x", "keywords": [], "decline": True}]}, "noop", "declined"),
        (SPLIT, {"plan_split": [{"segments": ["I went hiking at Zion on Saturday.", "I flew to Mars."]}]}, "skipped", "ungrounded"),
        (SPLIT, {"plan_split": [{"segments": ["I went hiking at Zion on Saturday.", "  "]}]}, "noop", "1 segment"),
        (SPLIT, {"plan_split": [{"reason": "no segments key"}]}, "skipped", "missing field 'segments'"),
        (SPLIT, {"plan_split": [{"segments": ["I went hiking at Zion on Saturday.", "My sister works as a nurse."]}],
                 "descriptor": [{"summary": "", "keywords": []}]}, "skipped", "sibling descriptor failed"),
    ],
)  # fmt: skip
def test_bad_plans_leave_the_bank_unchanged(tmp_path, proposals, script, state, reason) -> None:
    bank = make_bank()
    before = snapshot(bank)
    events, _ = run_atc(bank, proposals, script, tmp_path)
    assert len(events) == 1 and events[0]["state"] == state and reason in events[0]["reason"]
    assert events[0]["calls"] >= 1 and events[0]["tokens"] > 0  # the failed call is still paid for and booked
    assert snapshot(bank) == before
    bank.check_invariants()


def test_stale_targets_are_skipped_never_retargeted(tmp_path) -> None:
    segs = ["I went hiking at Zion on Saturday.", "My sister works as a nurse."]
    props = [
        {"op": "split", "target": ["u000000"], "p": 0.95},
        {"op": "merge", "target": ["u000000", "u000001"], "p": 0.95},  # u000000 was split earlier in the run
        {"op": "merge", "target": ["u000001", "u000002"], "p": 0.95},
        {"op": "update", "target": ["u000002", "u000001"], "p": 0.95},  # both merged earlier in the run
    ]
    merge_plan = {"summary": "Ann drives a Honda Civic.", "keywords": []}
    bank = make_bank()
    events, _ = run_atc(
        bank, props, {"plan_split": [{"segments": segs}], "plan_merge": [merge_plan]}, tmp_path
    )
    assert [(e["op"], e["state"]) for e in events] == [
        ("split", "executed"), ("merge", "skipped"), ("merge", "executed"), ("update", "skipped"),
    ]  # fmt: skip
    assert all("stale" in e["reason"] and e["calls"] == 0 for e in events if e["state"] == "skipped")
    # the stale targets changed nothing: the same bank as a run with only the two valid targets
    ref = make_bank()
    run_atc(
        ref,
        [props[0], props[2]],
        {"plan_split": [{"segments": segs}], "plan_merge": [merge_plan]},
        tmp_path / "r",
    )
    assert snapshot(bank) == snapshot(ref)


def test_coherence_guard_skips_incoherent_merges_before_planning(tmp_path) -> None:
    bank = make_bank()
    before = snapshot(bank)
    props = [{"op": "merge", "target": ["u000000", "u000003"], "p": 0.95}]
    events, _ = run_atc(bank, props, {}, tmp_path, coherence_guard=True, coherence_min=0.99)
    assert events[0]["state"] == "skipped" and "incoherent" in events[0]["reason"] and events[0]["calls"] == 0
    assert snapshot(bank) == before


def test_diagnosis_failures_are_counted_not_fatal(tmp_path) -> None:
    bank = make_bank()
    before = snapshot(bank)
    llm = build_llm(
        {
            "_target_": "allmem.llm.scripted.ScriptedBackend",
            "backend": "scripted",
            "script": {"diagnose": ["{broken"] * 5},
            "cache": {"enabled": False},
        }
    )
    c = build_consolidator(
        bank=bank,
        llm=llm,
        embedder=HashEmbedder(dim=64),
        cfg=paper(ATCConfig),
        run_dir=tmp_path,
        embed_format="paper",
    )
    for u in bank.ids():
        c.on_write(u)
    c.run("test")
    diag = next(e for e in c.log.events if e["kind"] == "diagnose")
    assert diag["failed"] == {"no_json": 5} and diag["accepted"] == 0
    assert snapshot(bank) == before
