"""AllMemSystem as a MemorySystem: lifecycle with the offline LLM, ATC hooks in stream order, save/load round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from allmem.embed import HashEmbedder
from allmem.llm import build_llm
from allmem.memory.system import AllMemSystem
from allmem.systems import Resources
from tests.fakes import stream_sessions
from tests.runkit import compose

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SESSIONS = [
    ["Ann loves hiking in the Alps", "Bob bought a red bike", "Ann went hiking with her sister"],
    ["Caroline adopted a puppy named Max", "Bob rides the red bike to work"],
    ["Max the puppy chewed the shoes", "Ann wants to climb Mont Blanc next summer"],
]


def _resources(tmp_path: Path) -> Resources:
    llm = build_llm(
        OmegaConf.load(CONFIGS / "llm" / "offline.yaml"), run_dir=tmp_path, cache_dir=tmp_path / "llm"
    )
    return Resources(embedder=HashEmbedder(), llm=llm, run_dir=tmp_path)


def _method_cfg(**atc: Any) -> dict[str, Any]:
    return {"atc": {"enabled": False, "every_sessions": 3} | atc}


def test_lifecycle_retrieve_and_stats(tmp_path) -> None:
    system = AllMemSystem.from_config(_resources(tmp_path), **_method_cfg())
    stream_sessions(system, SESSIONS)
    res = system.retrieve("Who adopted a puppy?")
    assert res.units and len(res.units) <= 16
    assert [u.score for u in res.units] == sorted((u.score for u in res.units), reverse=True)
    assert {"embed", "stage1", "stage2", "stage3"} <= set(res.timings_ms)
    top = res.units[0]
    assert top.source_ids and top.speaker == "Ann" and top.timestamp is not None
    stats = system.stats()
    assert (stats["n_units"], stats["n_visible"], stats["n_archived"]) == (7, 7, 0)
    assert stats["descriptor_failures"] == 0 and stats["links_temporal"] == 6
    assert stats["recoverability"]["n_archived"] == 0
    system.reset("conv-y")
    assert system.stats()["n_units"] == 0  # a new dialogue starts empty


class _RecordingATC:
    def __init__(
        self, bank: Any, llm: Any, embedder: Any, cfg: Any, run_dir: Path, embed_format: str
    ) -> None:
        self.bank, self.cfg, self.events = bank, cfg, []

    def on_write(self, uid: str) -> None:
        assert uid in self.bank  # the unit exists and is linked when the hook fires
        self.events.append(("write", uid))

    def on_turn_end(self) -> None:
        self.events.append(("turn",))

    def on_session_end(self) -> None:
        self.events.append(("session",))

    def on_stream_end(self) -> None:
        self.events.append(("stream",))
        self.bank.archive("u000000")

    def stats(self) -> dict[str, Any]:
        return {"events": len(self.events), "atc_runs": 1}


def test_atc_hooks_fire_in_stream_order(tmp_path, monkeypatch) -> None:
    # build_consolidator is the contract between the system and its consolidator (allmem/memory/system.py)
    monkeypatch.setattr("allmem.memory.atc.build_consolidator", _RecordingATC)
    system = AllMemSystem.from_config(_resources(tmp_path), **_method_cfg(enabled=True, theta=0.9))
    stream_sessions(system, SESSIONS)
    atc = system.consolidator
    assert atc.cfg.theta == 0.9
    expected: list[tuple] = []
    uid = 0
    for texts in SESSIONS:
        for _ in texts:
            expected += [("write", f"u{uid:06d}"), ("turn",)]
            uid += 1
        expected.append(("session",))
    assert atc.events == [*expected, ("stream",)]
    stats = system.stats()
    assert stats["atc_events"] == len(expected) + 1 and stats["atc_runs"] == 1
    assert stats["n_archived"] == 1 and stats["recoverability"]["n_archived"] == 1


def test_system_save_load_round_trip(tmp_path) -> None:
    a = AllMemSystem.from_config(_resources(tmp_path), **_method_cfg())
    stream_sessions(a, SESSIONS)
    queries = ["red bike", "puppy", "hiking Alps", "Mont Blanc"]
    before = [[(u.id, u.score, u.source_ids) for u in a.retrieve(q).units] for q in queries]
    a.save(tmp_path / "bank")
    b = AllMemSystem.from_config(_resources(tmp_path), **_method_cfg())
    b.load(tmp_path / "bank")
    after = [[(u.id, u.score, u.source_ids) for u in b.retrieve(q).units] for q in queries]
    assert after == before
    assert b.dialogue_id == "conv-x" and b.writer.last_id == "u000006"


def _method(*overrides: str) -> Any:
    return OmegaConf.to_container(compose(*overrides).method, resolve=True)


def test_configs_carry_the_paper_and_reference_settings() -> None:
    paper = _method("method=allmem")
    r = paper["retrieval"]
    assert (r["k"], r["L"], r["K"], r["H"], paper["links"]["d_sigma"]) == (10, 40, 16, 2, 8)
    atc_keys = ("enabled", "every_sessions", "every_turns", "theta")
    assert {k: paper["atc"][k] for k in atc_keys} == dict(zip(atc_keys, (True, 3, None, 0.9), strict=True))
    assert _method("method=allmem", "atc.enabled=false")["atc"]["enabled"] is False
    noatc = _method("method=allmem_noatc")
    assert noatc["name"] == "allmem_noatc" and noatc["atc"]["enabled"] is False
    assert {k: v for k, v in noatc.items() if k not in ("name", "atc")} == {
        k: v for k, v in paper.items() if k not in ("name", "atc")
    }
    ref = _method("method=allmem_ref")
    rr = ref["retrieval"]
    assert ref["links"]["d_sigma"] is None and ref["write"]["sem_per_insert"] == 3
    assert ref["write"]["sem_threshold"] == 0.65
    assert (rr["L"], rr["K"], rr["H"], set(rr["link_types"]), rr["directions"]) == (
        50,
        10,
        1,
        {"sibling", "version"},
        "both",
    )
    assert _method("method=allmem_fullbank")["retrieval"]["surface"] == "full"
    assert _method("method=allmem_noexpand")["retrieval"]["expand"] is False
    assert _method("method=allmem_noprio")["retrieval"]["type_priority"] is False
