"""The allmem_hybrid variant end to end on a small stream: budget filling through the harness's pack, and the
signals it adds (date periods, reply links, the dense query filter) on hand-made cases."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from allmem.budget import context_line, pack
from allmem.build import build
from allmem.embed import HashEmbedder
from allmem.llm import build_llm
from allmem.memory.signals import in_periods, query_periods
from allmem.systems import Resources
from allmem.tokens import count_tokens
from allmem.types import SessionInfo, Turn
from tests.runkit import compose

T0 = datetime(2023, 5, 8, 13, 56)


def _system(tmp_path: Path, method: str = "allmem_hybrid", *overrides: str):
    cfg = compose(f"method={method}", "atc.enabled=false", *overrides)
    llm = build_llm(cfg.llm, run_dir=tmp_path, cache_dir=tmp_path / "llm")
    return build(cfg.method, resources=Resources(embedder=HashEmbedder(), llm=llm, run_dir=tmp_path))


def _feed(system, n_sessions: int = 8, per_session: int = 16) -> None:
    system.reset("conv-t")
    topics = [
        "hiking trip",
        "pottery class",
        "guitar lessons",
        "adoption agency",
        "camping weekend",
        "book club",
    ]
    order = 0
    for s in range(n_sessions):
        date = T0 + timedelta(days=30 * s)
        info = SessionInfo(f"S{s + 1}", date, s)
        system.start_session(info)
        for i in range(per_session):
            speaker = "Ann" if i % 2 == 0 else "Bob"
            text = f"We talked about the {topics[(s + i) % len(topics)]} and what happened there, turn {i}."
            system.ingest(
                Turn(
                    f"D{s + 1}:{i + 1}",
                    f"S{s + 1}",
                    speaker,
                    text,
                    date,
                    order,
                    source_id=f"D{s + 1}:{i + 1}",
                )
            )
            order += 1
        system.end_session(info)
    system.end_stream()


@pytest.mark.slow
def test_variant_fills_the_budget_and_pack_stops_at_a_unit_boundary(tmp_path) -> None:
    variant, paper = _system(tmp_path), _system(tmp_path, "allmem")
    _feed(variant), _feed(paper)
    query = "What did Ann say about the pottery class?"
    ours, theirs = variant.retrieve(query).units, paper.retrieve(query).units
    assert len(theirs) == 16  # the paper keeps K units
    assert len(ours) > 16  # the variant returns more than fits: the budget decides
    assert [u.score for u in ours] == sorted((u.score for u in ours), reverse=True)
    lines = [context_line(u) for u in ours]
    budget = count_tokens("\n".join(lines[:20])) + 5  # room for 20 units and a few tokens, not for a 21st
    packed = pack(ours, budget)
    assert packed.used_tokens <= budget
    assert len(packed.units) == 20 and packed.n_dropped == len(ours) - 20
    assert {u.id for u in packed.units} == {u.id for u in ours[:20]}  # a prefix of the ranking
    assert count_tokens("\n".join(lines[:21])) > budget  # the next unit would not have fitted
    # at the default 2048 tokens the variant's context is full, the paper's holds its 16 units only
    full, short = pack(ours, 2048), pack(theirs, 2048)
    assert full.n_dropped > 0 and full.used_tokens > short.used_tokens and short.n_dropped == 0


def test_query_periods_and_membership() -> None:
    assert query_periods("What did Joanna bake in May 2022?") == [(2022, 5)]
    assert query_periods("Which tournament did Nate win in the beginning of November, 2022?") == [(2022, 11)]
    assert query_periods("What may Caroline do in 2023?") == [(2023, None)]  # "may" the verb opens nothing
    assert query_periods("Did they meet last July or in August 2021?") == [(None, 7), (2021, 8)]
    assert query_periods("What did Ann say?") == []
    assert in_periods(datetime(2022, 5, 20), [(2022, 5)]) and not in_periods(
        datetime(2023, 5, 20), [(2022, 5)]
    )
    assert in_periods(datetime(2019, 7, 1), [(None, 7)]) and in_periods(datetime(2023, 1, 1), [(2023, None)])
