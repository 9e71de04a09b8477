"""Re-used banks give the answers a fresh ingestion gives; a different stream or setting never re-uses; the
Stage 1 probe writes one line per consolidation checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import stream_sessions
from omegaconf import OmegaConf

from allmem import files
from allmem.embed import HashEmbedder
from allmem.llm import build_llm
from allmem.memory.system import AllMemSystem
from allmem.run import compare, identity
from allmem.run.runner import run
from allmem.systems import Resources
from tests.runkit import compose

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _common(tmp: Path, cache: Path, fixtures: Path) -> list[str]:
    return [f"dataset.path={fixtures / 'locomo_tiny.json'}", f"run.root={tmp / 'runs'}", f"paths.cache_dir={cache}",
            f"embedder.cache_dir={cache / 'embeddings'}", "run.progress=false"]  # fmt: skip


def _answers(run_dir: Path) -> list[dict]:
    return [
        {k: v for k, v in r.items() if k != "latency_ms"}
        for r in files.read_jsonl(run_dir / files.PREDICTIONS)
    ]


@pytest.mark.slow  # the real embedding model
def test_reused_bank_answers_exactly_like_a_fresh_ingestion(tmp_path, cache_dir, fixtures_dir):
    common = _common(tmp_path, cache_dir, fixtures_dir)
    banks = f"run.bank_cache={tmp_path / 'banks'}"
    first = run(compose("method=allmem", banks, "run.probe_queries=4", *common))
    reused = run(compose("method=allmem", banks, "run.probe_queries=4", "method.retrieval.K=4", *common))
    # the bank folder is not part of a run's identity: a fresh ingestion needs its own run root
    fresh = run(compose("method=allmem", "run.probe_queries=4", "method.retrieval.K=4", *common,
                      f"run.root={tmp_path / 'fresh'}"))  # fmt: skip
    assert _answers(reused) == _answers(fresh)

    def stats(d: Path) -> list[dict]:
        return files.read_jsonl(d / files.SYSTEM_STATS)

    assert all(s["bank_cache"]["hit"] is False for s in stats(first))
    assert all(s["bank_cache"]["hit"] is True for s in stats(reused))
    assert "bank_cache" not in stats(fresh)[0]
    for a, b in zip(stats(reused), stats(fresh), strict=True):  # the bank's own numbers are the same
        assert (a["n_units"], a["n_visible"], a["recoverability"]) == (
            b["n_units"],
            b["n_visible"],
            b["recoverability"],
        )
    # the ATC events (probe lines included) of the building run travel with the bank, marked as re-used
    ev_first = [json.loads(x) for x in (first / "atc_events.jsonl").read_text().splitlines()]
    ev_reused = [json.loads(x) for x in (reused / "atc_events.jsonl").read_text().splitlines()]
    assert len(ev_reused) == len(ev_first) and all(e["reused"] for e in ev_reused)
    assert [e["kind"] for e in ev_reused] == [e["kind"] for e in ev_first]
    assert {e["kind"] for e in ev_first} >= {"run", "probe"}


def _resources(tmp: Path) -> Resources:
    llm = build_llm(OmegaConf.load(CONFIGS / "llm" / "offline.yaml"), run_dir=tmp, cache_dir=tmp / "llm")
    return Resources(embedder=HashEmbedder(), llm=llm, run_dir=tmp)


SESSIONS = [
    ["Ann loves hiking in the Alps", "Bob bought a red bike", "Ann went hiking with her sister"],
    ["Caroline adopted a puppy named Max", "Bob rides the red bike to work"],
    ["Max the puppy chewed the shoes", "Ann wants to climb Mont Blanc next summer"],
]


def _system(tmp: Path, cache: Path | None, probe: int = 0, **atc) -> AllMemSystem:
    atc = {"enabled": True, "every_sessions": 1} | atc
    return AllMemSystem.from_config(_resources(tmp), bank_cache=cache, probe_queries=probe, atc=atc)


def _bank(system: AllMemSystem) -> list[tuple]:
    return [(u.id, u.visible, u.summary, tuple(r.text for r in u.evidence)) for u in system.bank.units()]


def test_a_different_stream_is_ingested_not_reused(tmp_path):
    cache = tmp_path / "banks"
    stream_sessions(_system(tmp_path / "a", cache), SESSIONS)
    changed = [SESSIONS[0], ["Caroline adopted a kitten named Max", SESSIONS[1][1]], SESSIONS[2]]
    for sessions in (changed, SESSIONS[:2]):  # a turn differs in session 2; the stream ends a session early
        cached = _system(tmp_path / "b", cache)
        stream_sessions(cached, sessions)
        fresh = _system(tmp_path / "c", None)
        stream_sessions(fresh, sessions)
        assert cached.stats()["bank_cache"]["hit"] is False
        assert _bank(cached) == _bank(fresh)
    same = _system(tmp_path / "d", cache)
    stream_sessions(
        same, SESSIONS
    )  # the first stream's entry was replaced by the last one written: SESSIONS[:2]
    assert same.stats()["bank_cache"]["hit"] is False
    again = _system(tmp_path / "e", cache)
    stream_sessions(again, SESSIONS)
    assert again.stats()["bank_cache"]["hit"] is True
    assert _bank(again) == _bank(same)


def test_key_follows_ingestion_settings_only(tmp_path):
    base = _system(tmp_path, tmp_path / "banks")
    other_retrieval = AllMemSystem.from_config(base.resources, bank_cache=tmp_path / "banks", retrieval={"K": 4, "L": 10},
                             atc={"enabled": True, "every_sessions": 1})  # fmt: skip
    same_atc = AllMemSystem.from_config(
        base.resources, bank_cache=tmp_path / "banks", atc={"enabled": True, "every_sessions": 1}
    )
    other_theta = AllMemSystem.from_config(base.resources, bank_cache=tmp_path / "banks",
                         atc={"enabled": True, "every_sessions": 1, "theta": 0.5})  # fmt: skip
    probed = AllMemSystem.from_config(base.resources, bank_cache=tmp_path / "banks", probe_queries=2,
                    atc={"enabled": True, "every_sessions": 1})  # fmt: skip
    assert other_retrieval.bank_cache.key == same_atc.bank_cache.key
    assert other_theta.bank_cache.key != same_atc.bank_cache.key
    assert probed.bank_cache.key != same_atc.bank_cache.key


def test_probe_times_both_surfaces_at_every_checkpoint(tmp_path):
    system = _system(tmp_path, None, probe=3)
    stream_sessions(system, SESSIONS)
    events = system.consolidator.log.events
    runs = [e for e in events if e["kind"] == "run"]
    probes = [e for e in events if e["kind"] == "probe"]
    assert (
        len(probes) == len(runs) == 3
    )  # one per session (every_sessions=1); nothing is left for the stream end
    assert [p["run"] for p in probes] == [r["run"] for r in runs]
    for p in probes:
        assert p["queries"] == 3 and p["k"] == 10 and p["n_units"] >= p["n_visible"]
        assert p["stage1_full_ms"] > 0 and p["stage1_visible_ms"] > 0
    off = _system(tmp_path / "off", None)
    stream_sessions(off, SESSIONS)
    assert not [e for e in off.consolidator.log.events if e["kind"] == "probe"]


def test_bank_cache_folder_is_not_part_of_a_runs_identity(cache_dir):

    a = compose("method=allmem", "run.bank_cache=/somewhere/banks")
    b = compose("method=allmem", "run.bank_cache=/elsewhere/banks")
    c = compose("method=allmem")
    assert identity.config_hash(a, "d") == identity.config_hash(b, "d") == identity.config_hash(c, "d")
    assert identity.override_dirname(
        ["run.bank_cache=/x", "hydra/launcher=local", "method.retrieval.K=4"]
    ) == ("method.retrieval.K=4")


def test_a_complete_run_under_another_name_is_not_made_again(tmp_path):
    from allmem import files

    twin = tmp_path / "locomo" / "allmem,experiment=table1-0123456789"
    twin.mkdir(parents=True)
    (twin / files.DONE).write_text("complete\n")
    asked = tmp_path / "locomo" / "allmem,experiment=fig3,method.retrieval.K=16-0123456789"
    assert identity.complete_twin(asked) == twin
    assert identity.complete_twin(tmp_path / "locomo" / "allmem-9999999999") is None
    assert identity.complete_twin(tmp_path / "my-named-run") is None  # run.name: no hash suffix
    (twin / files.DONE).unlink()
    assert identity.complete_twin(asked) is None  # incomplete runs never count


def test_a_run_that_reused_its_banks_equals_the_run_that_ingested_them(tmp_path, cache_dir, fixtures_dir):
    # make reproduce with JOBS=1 finds allmem's banks when allmem_hybrid runs; with JOBS=2 both ingest. The two
    # must be the same result: the re-using run books the building run's ingestion calls (as cached replies) and
    # reports its stats and ATC events.
    banks = f"run.bank_cache={tmp_path / 'banks'}"
    common = ["method=allmem", banks, *_common(tmp_path, cache_dir, fixtures_dir)[:-2], "embedder=hash",
              f"paths.cache_dir={cache_dir}", "run.progress=false"]  # fmt: skip
    built = run(compose(*common))
    reused = run(compose(*common, f"run.root={tmp_path / 'again'}"))
    assert all(s["bank_cache"]["hit"] for s in files.read_jsonl(reused / files.SYSTEM_STATS))
    ingestion = [c for c in files.read_jsonl(reused / files.CALLS) if c["question_id"] is None]
    assert ingestion and all(c["cached"] for c in ingestion)
    built_ingestion = [c for c in files.read_jsonl(built / files.CALLS) if c["question_id"] is None]
    assert [c["prompt_hash"] for c in ingestion] == [c["prompt_hash"] for c in built_ingestion]
    assert compare.same_result(built, reused) == []
