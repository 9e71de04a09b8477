"""Table 2: cost per method: online write per turn, retrieval per query, ATC per event and amortised per turn.

Definitions (paper Sec. 4.5 and App. D; METHOD.md, cost accounting):
- online write per turn: wall time of ingestion (every ``ingest`` and session/stream end) minus the time spent in
  ATC runs, over the turns written; tokens: the ``write`` phase's LLM tokens (in + out) over the turns;
- retrieval per query: wall time of ``system.retrieve`` without the time spent in the embedder (``search``:
  independent of what the embedding cache held, so of the order methods ran in), with p50 / p95 / p99 / max;
  the query embedding apart, timed by the model with the cache bypassed (``query_embed``, the same for every
  method; n/a for a method that embeds nothing); the ``retrieve`` phase's LLM tokens, and the context tokens
  injected into the generator (after the budget); ``allmem/run/timing.py``;
- write tails: p50 / p95 / p99 / max of the wall time of each ``ingest`` call (a turn; All-Mem pays its
  consolidation runs in the turn that triggers them), and of each ``end_session`` call (where a method that
  buffers its turns writes them);
- ATC: one event is one consolidation run; tokens are its diagnosis and planning calls, time its wall time;
  amortised per turn = the totals over the turns those runs covered;
- dollars only when the backend is a real LLM and the config carries prices (``llm.prices``).
A run that re-used banks (``bank_cache``) reports the ingestion time measured when those banks were built; its
ledger holds the building run's ingestion calls (booked as cached replies), so its tokens are counted as usual.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import pandas as pd

from allmem.report.runs import Run
from allmem.report.tables import markdown
from allmem.run.timing import percentiles

DEFINITIONS = (
    "Write: wall time of ingestion minus ATC runs, per turn written; tokens: the write phase's LLM calls (in + out).",
    "Search: wall time of system.retrieve per query without the time inside the embedder, so the same whatever the"
    " embedding cache held (mean, then p50 / p95 / p99 / max); Query embed: the model's time for the texts the"
    " method embedded at query time, cache bypassed (– for a method that embeds nothing); LLM tokens of the retrieve"
    " phase; context tokens packed into the generator (after the matched budget).",
    "Write tails: p50 / p95 / p99 / max of each ingest call (one turn), flushes and consolidation runs included in"
    " the turn that triggers them; Session-end: the same of each end_session call, where a method that buffers its"
    " turns writes them; – when the banks were re-used or the run predates per-turn timings.",
    "ATC: an event is one consolidation run; tokens are its diagnosis and planning calls, time its wall time;"
    " amortised = totals over the turns the runs covered. USD: uncached price of every call, with a real LLM only.",
    "(bank re-used): the run loaded banks ingested by an earlier run; its write and ATC columns are those measured"
    " when the banks were built.",
)


def _tokens(t: dict[str, Any] | None) -> float:
    t = t or {}
    return float(t.get("tokens_in", 0) + t.get("tokens_out", 0))


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def run_cost(run: Run) -> dict[str, Any]:
    """The Table 2 row of one run (numbers, None where not applicable)."""
    stats = list(run.stats().values())
    turns = sum(int(s.get("turns", 0)) for s in stats)
    phases = dict(run.metrics.get("cost") or {})
    reused = run.reused_bank
    # Per dialogue: a bank loaded from the cache was ingested by the run that built it, so its time is the one
    # measured there; a dialogue that missed the cache (e.g. its bank was still being built by a run in parallel)
    # was ingested here and is timed from this run's own stats. Write tokens come from the ledger either way (a
    # re-used bank's ingestion calls are booked in it as cached replies).
    write_tokens = _tokens(phases.get("write"))
    ingest_s = 0.0
    for s in stats:
        cache = s.get("bank_cache") or {}
        if cache.get("hit"):
            ingest_s += float(cache.get("ingest_s") or 0.0)
        else:
            ingest_s += float(s.get("ingest_s", 0.0)) + float(s.get("end_stream_s", 0.0))
    atc_runs = run.events("run")
    atc_ms = sum(float(e.get("latency_ms", 0.0)) for e in atc_runs)
    atc_tokens = sum(float(e.get("tokens", 0)) for e in atc_runs)
    atc_turns = sum(int(e.get("turns_since_last", 0)) for e in atc_runs)
    records = run.end_records()  # one per question (protocol.ask=both: the end ones)
    n_q = len(records)
    retrieve_ms = [float((r.get("latency_ms") or {}).get("retrieve", 0.0)) for r in records]
    search_ms = [
        float(v) for r in records if (v := (r.get("latency_ms") or {}).get("retrieve_search")) is not None
    ]
    embed_ms = [
        float(v) for r in records if (v := (r.get("latency_ms") or {}).get("query_embed")) is not None
    ]
    turn_ms = [] if reused else [float(v) for s in stats for v in s.get("turn_write_ms") or ()]
    session_ms = [] if reused else [float(v) for s in stats for v in s.get("session_end_ms") or ()]
    row: dict[str, Any] = {
        "method": run.method,
        "dataset": run.dataset,
        "turns": turns,
        "questions": n_q,
        "bank_reused": reused,
        "write_ms_per_turn": (1000 * ingest_s - atc_ms) / turns if turns else None,
        "write_tokens_per_turn": write_tokens / turns if turns else None,
        "retrieve_ms_per_query": _mean(retrieve_ms),
        "retrieve_ms_p50": statistics.median(retrieve_ms) if retrieve_ms else None,
        "search_ms_per_query": _mean(search_ms),
        **{f"search_ms_{k}": v for k, v in percentiles(search_ms).items()},
        "query_embed_ms_per_query": _mean(embed_ms),
        **{f"write_ms_{k}": v for k, v in percentiles(turn_ms).items()},
        **{f"session_end_ms_{k}": v for k, v in percentiles(session_ms).items()},
        "retrieve_llm_tokens_per_query": _tokens(phases.get("retrieve")) / n_q if n_q else None,
        "context_tokens_per_query": _mean([float(r.get("context_tokens", 0)) for r in records]),
        "generate_tokens_per_query": _tokens(phases.get("generate")) / n_q if n_q else None,
        "atc_events": len(atc_runs) if atc_runs else None,
        "atc_s_per_event": atc_ms / 1000 / len(atc_runs) if atc_runs else None,
        "atc_tokens_per_event": atc_tokens / len(atc_runs) if atc_runs else None,
        "atc_s_per_turn": atc_ms / 1000 / atc_turns if atc_turns else None,
        "atc_tokens_per_turn": atc_tokens / atc_turns if atc_turns else None,
        "usd": None,
    }
    if not run.offline and run.value("llm.prices"):
        from allmem.llm.ledger import price_run

        priced = price_run(run.path)
        row["usd"] = priced["usd_uncached"]
        for phase, v in priced["by_phase"].items():
            row[f"usd_{phase}"] = v["usd_uncached"]
    return row


def compute(runs: Sequence[Run]) -> pd.DataFrame:
    return pd.DataFrame([run_cost(r) for r in runs])


def _f(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "–"
    return f"{v:,.{digits}f}" if isinstance(v, float) else str(v)


def _tails(row: Any, prefix: str) -> str:
    return " / ".join(_f(row.get(f"{prefix}_{k}"), 2) for k in ("p50", "p95", "p99", "max"))


def markdown_for(table: pd.DataFrame) -> str:
    header = ["Method", "Write ms/turn", "Write tok/turn", "Write ms p50 / p95 / p99 / max",
              "Session-end ms p50 / p95 / p99 / max", "Search ms/query",
              "Search ms p50 / p95 / p99 / max", "Query embed ms", "Retrieve LLM tok/query",
              "Context tok/query", "ATC events", "ATC s/event", "ATC tok/event", "ATC s/turn (amort.)",
              "ATC tok/turn (amort.)", "USD (all calls)"]  # fmt: skip
    rows = []
    for _, r in table.iterrows():
        usd = "n/a (offline)" if r["usd"] is None or pd.isna(r["usd"]) else f"${r['usd']:.2f}"
        rows.append([
            r["method"] + (" (bank re-used)" if r["bank_reused"] else ""), _f(r["write_ms_per_turn"]),
            _f(r["write_tokens_per_turn"]), _tails(r, "write_ms"), _tails(r, "session_end_ms"), _f(r["search_ms_per_query"], 2),
            _tails(r, "search_ms"), _f(r["query_embed_ms_per_query"], 2),
            _f(r["retrieve_llm_tokens_per_query"]), _f(r["context_tokens_per_query"], 0), _f(r["atc_events"], 0),
            _f(r["atc_s_per_event"], 2), _f(r["atc_tokens_per_event"], 0), _f(r["atc_s_per_turn"], 3),
            _f(r["atc_tokens_per_turn"], 0), usd,
        ])  # fmt: skip
    return markdown(header, rows)
