"""Table 2's write cost when only some dialogues found their bank in the bank cache, worked out by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from allmem.report.tables.cost import run_cost


def _run(stats: dict, write_calls: dict, atc_events: list[dict]) -> SimpleNamespace:
    return SimpleNamespace(
        stats=lambda: stats,
        metrics={"cost": {"write": write_calls}},
        reused_bank=any((s.get("bank_cache") or {}).get("hit") for s in stats.values()),
        events=lambda kind: atc_events if kind == "run" else [],
        end_records=lambda: [{"latency_ms": {"retrieve": 2.0}, "context_tokens": 100}],
        method="allmem_hybrid",
        dataset="locomo",
        offline=True,
    )


def test_a_partly_cached_run_costs_each_dialogue_where_it_was_ingested():
    # d1 loaded its bank (built elsewhere in 4 s; its 300 write tokens are booked in this run's ledger as cached
    # replies); d2 missed and was ingested here in 3 s + 1 s end of stream with 200 write tokens. The ledger holds
    # both: 500. ATC ran 1 s in all, over 10 turns.
    stats = {
        "d1": {"turns": 10, "ingest_s": 0.01, "bank_cache": {"hit": True, "ingest_s": 4.0}},
        "d2": {"turns": 10, "ingest_s": 3.0, "end_stream_s": 1.0, "bank_cache": {"hit": False}},
    }
    row = run_cost(
        _run(stats, {"tokens_in": 400, "tokens_out": 100}, [{"latency_ms": 1000.0, "turns_since_last": 10}])
    )
    # ingestion 4 s (cached) + 4 s (here) - 1 s ATC = 7 s over 20 turns; tokens (300 + 200) / 20 turns
    assert row["write_ms_per_turn"] == pytest.approx(7000 / 20)
    assert row["write_tokens_per_turn"] == pytest.approx(500 / 20)
    assert row["bank_reused"] is True


def test_a_run_without_the_cache_is_costed_from_its_own_stats():
    stats = {"d1": {"turns": 4, "ingest_s": 2.0, "end_stream_s": 0.0}}
    row = run_cost(_run(stats, {"tokens_in": 40, "tokens_out": 0}, []))
    assert row["write_ms_per_turn"] == pytest.approx(500.0)
    assert row["write_tokens_per_turn"] == pytest.approx(10.0)
    assert row["bank_reused"] is False and row["atc_events"] is None
