"""Latency that compares across methods (allmem/run/timing.py, Table 2): search time without the query embedding,
the embedding timed apart with the cache bypassed, and tail percentiles."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from allmem import files
from allmem.metrics.protocols import get_protocol
from allmem.report.runs import Run
from allmem.report.tables.cost import markdown_for, run_cost
from allmem.run.pipeline import answer_question, ingest
from allmem.run.timing import model_ms, percentiles, watch
from allmem.systems import MemorySystem
from allmem.types import Answer, Dialogue, Question, RetrievalResult, Session
from tests.fakes import make_turns

SLOW_MS = 60.0  # what the fake model takes per call; a cache hit takes nothing


class _CachedEmbedder:
    """A model that sleeps SLOW_MS per call behind a cache, as ``allmem.embed.Embedder`` is."""

    dim = 4

    def __init__(self) -> None:
        self.cache: set[str] = set()
        self.model_calls = 0

    def encode(self, texts):
        missing = [t for t in texts if t not in self.cache]
        if missing:
            self.encode_uncached(missing)
            self.cache.update(missing)
        return np.ones((len(texts), self.dim), dtype=np.float32) / 2

    def encode_one(self, text):
        return self.encode([text])[0]

    def encode_uncached(self, texts):
        self.model_calls += 1
        time.sleep(SLOW_MS / 1000)
        return np.ones((len(texts), self.dim), dtype=np.float32) / 2


class _DenseSystem(MemorySystem):
    """Embeds the query (``query: <text>``) and returns nothing."""

    def __init__(self, embedder) -> None:
        self.embedder = embedder

    def reset(self, dialogue_id: str) -> None: ...

    def ingest(self, turn) -> None:
        time.sleep(0.001 if turn.order % 2 else 0)

    def retrieve(self, query, when=None) -> RetrievalResult:
        self.embedder.encode_one(f"query: {query}")
        return RetrievalResult(units=())

    def stats(self):
        return {}


class _Lexical(_DenseSystem):
    def retrieve(self, query, when=None) -> RetrievalResult:
        return RetrievalResult(units=())


class _Reader:
    def answer(self, request):
        return Answer(text="x")


def _ask(system, embedder, qid: str = "q1"):
    q = Question(id=qid, dialogue_id="d", text="where?", gold="x", evidence=())
    return answer_question(
        system, _Reader(), q, 100, 0, None, get_protocol("allmem"), embedder=embedder
    ).latency_ms


def test_search_time_does_not_depend_on_run_order() -> None:
    emb = _CachedEmbedder()
    first = _ask(_DenseSystem(emb), emb)  # cold cache: the method's retrieve pays the model
    second = _ask(_DenseSystem(emb), emb)  # the same question again: the cache answers
    assert first["retrieve"] >= SLOW_MS and second["retrieve"] < SLOW_MS  # what the old column showed
    for lat in (first, second):
        assert lat["retrieve_search"] < SLOW_MS / 2  # the embedder's time is taken out, cache or not
        assert lat["query_embed"] >= SLOW_MS  # the model timed with the cache bypassed, both times
    assert emb.model_calls == 3  # the cold retrieve, then one bypassing call per question
    lexical = _ask(_Lexical(emb), emb)
    assert "query_embed" not in lexical  # embeds nothing: no query-embedding figure


def test_watch_counts_only_its_own_block() -> None:
    emb = _CachedEmbedder()
    emb.encode(["before"])
    with watch(emb) as seen:
        emb.encode_one("inside")
    emb.encode(["after"])
    assert seen.texts == ["inside"] and seen.ms >= SLOW_MS
    assert model_ms(emb, []) is None and model_ms(None, []) is None


def test_percentiles_by_hand() -> None:
    assert percentiles(range(1, 101)) == {"p50": 50.0, "p95": 95.0, "p99": 99.0, "max": 100.0}
    # nearest rank over [1, 3, 5]: p50 -> rank ceil(1.5) = 2; p95, p99 -> rank 3
    assert percentiles([5, 1, 3]) == {"p50": 3.0, "p95": 5.0, "p99": 5.0, "max": 5.0}
    assert percentiles([]) == {"p50": None, "p95": None, "p99": None, "max": None}


def test_ingest_times_every_turn() -> None:
    turns = make_turns(["a", "b", "c", "d"])
    session = Session(id="S1", date=turns[0].timestamp, index=0, turns=tuple(turns))
    out = ingest(_DenseSystem(_CachedEmbedder()), Dialogue(id="d", sessions=(session,), questions=()), False)
    assert len(out["turn_write_ms"]) == 4 and len(out["session_end_ms"]) == 1  # one session
    assert all(ms >= 1.0 for ms in out["turn_write_ms"][1::2])  # the odd turns sleep 1 ms


def test_table2_tails_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "run"
    path.mkdir()
    records = [
        {"question_id": f"q{i}", "dialogue_id": "d", "category": 1, "question": "?", "prediction": "x", "gold": "x",
         "evidence": [], "ranked_source_ids": [], "context_tokens": 0,
         "latency_ms": {"retrieve": 10.0 + s, "retrieve_search": s, **({"query_embed": 4.0} if i else {})}}
        for i, s in enumerate([1.0, 2.0, 3.0, 4.0])
    ]  # fmt: skip
    files.write_atomic(path / files.PREDICTIONS, "".join(files.dump_line(r) for r in records))
    stats = [{"dialogue_id": "d", "turns": 5, "ingest_s": 0.015, "end_stream_s": 0.0,
              "turn_write_ms": [1.0, 1.0, 2.0, 1.0, 10.0], "session_end_ms": [7.0, 3.0]}]  # fmt: skip
    files.write_atomic(path / files.SYSTEM_STATS, "".join(files.dump_line(r) for r in stats))
    files.write_atomic(path / files.EVENTS, "")
    cfg = OmegaConf.create(
        {"method": {"name": "m"}, "dataset": {"name": "locomo"}, "protocol": {"name": "allmem"}}
    )
    row = run_cost(Run(path=path, cfg=cfg, metrics={"backend": {"offline": True}}))
    assert row["search_ms_per_query"] == pytest.approx(2.5)
    assert (row["search_ms_p50"], row["search_ms_p95"], row["search_ms_max"]) == (2.0, 4.0, 4.0)
    assert row["query_embed_ms_per_query"] == pytest.approx(4.0)  # the three questions that embedded
    # [1, 1, 1, 2, 10]: p50 -> rank 3 = 1; p95, p99 -> rank 5 = 10
    assert (row["write_ms_p50"], row["write_ms_p95"], row["write_ms_p99"], row["write_ms_max"]) == (
        1,
        10,
        10,
        10,
    )
    # session ends [3, 7]: p50 -> rank 1 = 3; p95, p99, max -> 7
    assert "| 1.00 / 10.00 / 10.00 / 10.00 | 3.00 / 7.00 / 7.00 / 7.00 |" in markdown_for(pd.DataFrame([row]))
