"""MemGPT's context window is the knob that drives eviction (issue 22 item 5, ``make memgpt_window``): a hand-checked
small case, a generated LongMemEval-shaped haystack, and the window in the run's identity (no shared banks)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from allmem.embed import HashEmbedder
from allmem.systems import Resources
from allmem.tokens import count_tokens
from allmem.types import format_date
from baselines.memgpt import MemGPT
from benchmarks.lme_synth import write_longmemeval
from benchmarks.longmemeval import load_longmemeval
from tests.baselines_support import add_session, scripted, turn

TURNS = [
    turn(
        f"D1:{i + 1}", "Ana" if i % 2 == 0 else "Ben", f"Message number {i + 1} is about topic {i + 1}.", i, i
    )
    for i in range(12)
]


def _run(window: int) -> MemGPT:
    """Twelve 19-token turns into a main context of ``window`` tokens with 60 system tokens; the agent saves
    nothing in a pressure step (so core memory stays empty) and every summary is "s"."""
    llm = scripted({"memgpt_pressure": [{"calls": []}] * 20, "memgpt_summarize": ["s"] * 20})
    system = MemGPT(
        context_window=window, system_tokens=60, resources=Resources(embedder=HashEmbedder(), llm=llm)
    )
    system.reset("conv-t")
    for t in TURNS[:12]:
        system.ingest(t)
    return system


def test_the_hand_checked_case_the_premises() -> None:
    lines = [f"[{format_date(t.timestamp)}] {t.render()}" for t in TURNS[:12]]
    assert {count_tokens(x) for x in lines} == {19}
    assert count_tokens("<persona></persona>\n<human></human>") == 10  # empty core memory
    assert count_tokens("Summary of the earlier conversation: s") == 7


@pytest.mark.parametrize(
    ("window", "evicted", "evictions", "alerts", "eviction_offers"),
    [
        # 60 + 10 + 12 x 19 = 298 tokens fit: one alert (turn 9, 241 > 225), nothing evicted
        (300, 0, 0, 1, 0),
        # alert at turn 5 (165 > 150, offers t1-t5); turn 7 (203 > 200) evicts the four turns before the last three
        # (75% of 133 is 99, more than the four hold), leaving summary + t5-t7 (134); alert at turn 8 (offers
        # t5-t8); turn 11 (210) evicts the summary and t5-t8; alert at turn 12. Every evicted turn was offered at an
        # alert, so no step is needed before an eviction.
        (200, 8, 2, 3, 0),
        # alert at turn 3 (127 > 112.5, offers t1-t3); turn 5 (165 > 150) evicts t1, t2 (75% of 95 is 71: two of
        # the two candidates), leaving 134; from then on every turn passes the window straight away (153), so it
        # evicts the summary and the oldest turn, and the alert (checked only below the window) never fires
        # again: t3 is evicted at turn 6 (offered at the alert), t4-t9 at turns 7-12, each offered in its own step
        # just before its eviction (before that step existed, these six left unseen).
        (150, 9, 8, 1, 6),
    ],
)
def test_window_drives_eviction_hand_checked(
    window: int, evicted: int, evictions: int, alerts: int, eviction_offers: int
) -> None:
    system = _run(window)
    stats = system.stats()
    assert stats.get("evicted_messages", 0) == evicted
    assert stats.get("evictions", 0) == evictions
    assert stats.get("pressure_alerts", 0) == alerts
    assert stats.get("eviction_offers", 0) == eviction_offers
    assert stats.get("evicted_never_offered", 0) == 0  # at every window: each evicted turn was offered first
    assert stats["calls_memgpt_pressure"] == alerts + eviction_offers
    assert stats["queue_messages"] == 12 - evicted and stats["recall_messages"] == 12


def test_eviction_falls_as_the_window_grows_on_a_generated_haystack(tmp_path: Path) -> None:
    path = write_longmemeval(tmp_path / "lme.json", questions=1, sessions=8, seed=3)
    dialogue = load_longmemeval(path)[0]
    turns = [t for s in dialogue.sessions for t in s.turns]
    lines = sum(count_tokens(f"[{format_date(t.timestamp)}] {t.render()}") for t in turns)
    assert 12_000 < lines < 24_000  # ~10 turns of ~230 tokens a session (benchmarks/lme_synth.py)
    evicted = {}
    for window in (4096, 8192, 16384, 24576):
        system = MemGPT(context_window=window, resources=Resources(embedder=HashEmbedder()))  # offline roles
        system.reset(dialogue.id)
        for i, session in enumerate(dialogue.sessions):
            add_session(system, session.turns, i)
        stats = system.stats()
        evicted[window] = stats.get("evicted_messages", 0)
        assert stats["queue_messages"] + evicted[window] == len(turns)  # each turn is queued or evicted
        assert system.context_tokens() <= window
        assert stats.get("evicted_never_offered", 0) == 0  # offered at an alert or just before the eviction
    assert evicted[4096] > evicted[8192] > evicted[16384] > 0
    assert evicted[24576] == 0  # the whole haystack (plus 2,000 system tokens) fits


def test_the_window_is_in_the_run_identity_and_memgpt_keeps_no_bank_cache() -> None:
    from allmem.report.targets import _compose
    from allmem.run import identity

    hashes = {
        identity.config_hash(_compose(["+experiment=memgpt_window", f"method.context_window={w}"]), "data")
        for w in (8192, 32768, 131072)
    }
    assert len(hashes) == 3
    # banks are shared only through run.bank_cache, which the runner hands only to a constructor that takes it
    # (All-Mem's); MemGPT ingests every run afresh, so two windows can never share an ingested bank
    assert "bank_cache" not in inspect.signature(MemGPT).parameters
