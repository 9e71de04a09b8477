"""Gating, normalisation, configuration, triggers and the Table 2/3 summary, with hand-computed expectations."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import numpy as np
import pytest

from allmem.defaults import paper
from allmem.llm import build_llm
from allmem.memory.atc.config import ATCConfig
from allmem.memory.atc.consolidator import build_consolidator
from allmem.memory.atc.events import read_events
from allmem.memory.atc.gate import canonical_id, gate
from allmem.memory.atc.summary import summarise_events, summarise_run_dir, table3_markdown
from allmem.memory.bank import MemoryBank

T0 = datetime(2023, 1, 1)


def small_bank(n: int = 5) -> MemoryBank:
    bank = MemoryBank(dim=4)
    for i in range(n):
        v = np.zeros(4)
        v[i % 4] = 1.0
        bank.create_unit(
            [{"speaker": "A", "text": f"t{i}"}], f"s{i}", [], v, T0 + timedelta(minutes=i), order=i
        )
    return bank


def P(op: str, target: list[str], p: float) -> dict:
    return {"op": op, "target": target, "p": p, "reason": "r"}


def test_config_thresholds_switches_and_errors() -> None:
    cfg = paper(ATCConfig, **{"theta": 0.8, "theta_merge": 0.95, "update": False})
    assert (cfg.threshold("split"), cfg.threshold("merge"), cfg.threshold("update")) == (0.8, 0.95, 0.8)
    assert cfg.ops == ("split", "merge")
    with pytest.raises(ValueError, match=r"atc\.thetta"):
        paper(ATCConfig, **{"thetta": 0.9})
    with pytest.raises(ValueError, match=r"atc\.theta_split"):
        paper(ATCConfig, **{"theta_split": 1.5})
    with pytest.raises(ValueError, match=r"atc\.every_sessions"):
        paper(ATCConfig, **{"every_sessions": 0})


def test_canonical_ids() -> None:
    bank = small_bank()
    assert [canonical_id(x, bank) for x in ("u000003", "3", "u3", " U0003 ", "u000009", "x")] == [
        "u000003", "u000003", "u000003", "u000003", None, None,
    ]  # fmt: skip


def test_gate_thresholds_norm_and_dedupe() -> None:
    bank = small_bank()
    bank.archive("u000004")
    cfg = paper(ATCConfig, **{"theta": 0.9, "theta_update": 0.8})
    props = [
        ("u000000", [P("merge", ["1", "u000000"], 0.95), P("Split", ["u000002"], 0.9), P("update", ["2", "0"], 0.85)]),
        ("u000001", [
            P("merge", ["u000000", "u000001"], 0.97),  # duplicate: keeps the first slot, raises p
            P("merge", ["u000001", "u000004"], 0.99),  # archived member
            P("split", ["u000002", "u000003"], 0.99),  # wrong arity
            P("update", ["u000003", "u000003"], 0.99),  # one distinct id
            P("update", ["u000003", "u000001"], 0.7),  # below theta_update
            P("merge", ["u000002", "nope"], 0.99),  # unknown id
            P("rewrite", ["u000002"], 0.99),  # unknown op
            {"op": "split", "target": ["u000003"]},  # no confidence
        ]),
    ]  # fmt: skip
    queues, dropped = gate(props, bank, cfg)
    assert [(t.ids, t.p, t.origin) for t in queues["merge"]] == [(("u000000", "u000001"), 0.97, "u000000")]
    assert [t.ids for t in queues["split"]] == [("u000002",)]
    assert [t.ids for t in queues["update"]] == [("u000002", "u000000")]  # order kept: (current, superseded)
    whys = sorted(d.why.split(":")[0].split(" ")[0] for d in dropped)
    assert whys == sorted(["duplicate", "not", "split", "update", "below", "unknown", "unknown", "no"])


def test_gate_respects_operator_switches() -> None:
    bank = small_bank()
    queues, dropped = gate(
        [("u000000", [P("split", ["u000000"], 0.99)])], bank, paper(ATCConfig, **{"split": False})
    )
    assert queues["split"] == [] and dropped[0].why == "operator off"


def _consolidator(tmp_path, **cfg):
    bank = small_bank(0)
    llm = build_llm(
        {
            "_target_": "allmem.llm.scripted.ScriptedBackend",
            "backend": "scripted",
            "script": {"diagnose": lambda req: {"proposals": []}},
            "cache": {"enabled": False},
        }
    )

    class Emb:
        def encode(self, texts):
            return np.ones((len(texts), 4), dtype=np.float32) / 2

    c = build_consolidator(
        bank=bank,
        llm=llm,
        embedder=Emb(),
        cfg=paper(ATCConfig, **cfg),
        run_dir=tmp_path,
        dialogue_id="d1",
        embed_format="paper",
    )

    def turn(i: int) -> None:
        v = np.zeros(4)
        v[i % 4] = 1.0
        uid = bank.create_unit([{"speaker": "A", "text": f"t{i}"}], f"s{i}", [], v, T0, order=i)
        c.on_write(uid)
        c.on_turn_end()

    return c, turn


def test_session_trigger_and_stream_end(tmp_path) -> None:
    c, turn = _consolidator(tmp_path, every_sessions=2)
    for s in range(5):  # 5 sessions of 3 turns: runs after sessions 2 and 4, then once at the end
        for i in range(3):
            turn(3 * s + i)
        c.on_session_end()
    c.on_stream_end()
    runs = [e for e in read_events(tmp_path) if e["kind"] == "run"]
    assert [(r["trigger"], r["turn"], r["turns_since_last"], r["buffered"]) for r in runs] == [
        ("sessions", 6, 6, 6), ("sessions", 12, 6, 6), ("stream", 15, 3, 3),
    ]  # fmt: skip
    c.on_stream_end()  # nothing buffered: no second stream-end run
    assert sum(e["kind"] == "run" for e in read_events(tmp_path)) == 3


def test_turn_trigger_and_off(tmp_path) -> None:
    c, turn = _consolidator(tmp_path / "a", every_sessions=None, every_turns=4, at_stream_end=False)
    for i in range(10):
        turn(i)
    c.on_session_end()
    c.on_stream_end()
    assert [e["turn"] for e in c.log.events if e["kind"] == "run"] == [4, 8]
    c, turn = _consolidator(tmp_path / "b", enabled=False)
    for i in range(4):
        turn(i)
    c.on_session_end()
    c.on_stream_end()
    assert c.log.events == [] and not (tmp_path / "b" / "atc_events.jsonl").exists()


def test_report_figures_by_hand(tmp_path) -> None:
    events = [
        {"kind": "diagnose", "dialogue": "a", "run": 1, "units": 4, "proposals": 3, "accepted": 2, "failed": {"no_json": 1}, "tokens": 400, "latency_ms": 80.0},
        {"kind": "target", "dialogue": "a", "run": 1, "op": "merge", "state": "executed", "tokens": 100, "latency_ms": 10.0},
        {"kind": "target", "dialogue": "a", "run": 1, "op": "merge", "state": "skipped", "tokens": 0, "latency_ms": 2.0},
        {"kind": "run", "dialogue": "a", "run": 1, "turns_since_last": 4, "turn": 4, "tokens": 500, "latency_ms": 100.0, "n_units": 5, "n_visible": 3},
        {"kind": "diagnose", "dialogue": "a", "run": 2, "units": 2, "proposals": 1, "accepted": 1, "failed": {}, "tokens": 200, "latency_ms": 40.0},
        {"kind": "target", "dialogue": "a", "run": 2, "op": "update", "state": "noop", "tokens": 60, "latency_ms": 6.0},
        {"kind": "run", "dialogue": "a", "run": 2, "turns_since_last": 6, "turn": 10, "tokens": 260, "latency_ms": 50.0, "n_units": 10, "n_visible": 8},
    ]  # fmt: skip
    (tmp_path / "atc_events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    s = summarise_run_dir(tmp_path)
    assert s == summarise_events(events)
    d, m, u = s["table3"]["diagnosis"], s["table3"]["merge"], s["table3"]["update"]
    assert (d["events"], d["tokens"], d["tokens_per_event"], d["failed"]) == (6, 600, 100.0, 1)
    assert (m["events"], m["executed"], m["skipped"], m["noop"], m["tokens"], m["latency_ms_per_event"]) == (
        2,
        1,
        1,
        0,
        100,
        6.0,
    )
    assert (u["events"], u["noop"]) == (1, 1) and s["table3"]["split"]["events"] == 0
    t2 = s["table2"]  # per event: (500 + 260) / 2 runs; per turn: 760 tokens / 10 turns, 150 ms / 10 turns
    assert (
        t2["runs"],
        t2["turns"],
        t2["tokens_per_event"],
        t2["tokens_per_turn"],
        t2["latency_ms_per_turn"],
    ) == (2, 10, 380.0, 76.0, 15.0)
    assert s["surface"] == {"a": {"n_units": 10, "n_visible": 8, "turns": 10}}
    assert "| merge | 2 | 1 | 1 | 0 | 100 | 50.0 | 6.0 |" in table3_markdown(s)
    (tmp_path / "atc_events.jsonl").write_text('{"kind": "run"}\nnot json\n')
    with pytest.raises(ValueError, match=r"atc_events.jsonl:2"):
        summarise_run_dir(tmp_path)
