"""The cost ledger: every LLM call appended to the run's ``calls.jsonl``, totals per phase for metrics.json.

Each line says what the call served: the runner opens a ``scope`` (dialogue id, question id, attempt) around each
dialogue's ingestion and each question, and every call booked inside it carries those ids, so a prediction joins
its prompts by question id and the answer's prompt hash. The dialogue's scope is ledger state, not a
``ContextVar``: consolidation and batched writes call the LLM from worker threads, which a context variable would
not reach. Questions answered concurrently (``allmem.run.questions``) each open a ``local_scope`` instead: a
``ContextVar`` over the shared scope, seen by the thread that opened it and by the threads ``LLM.chat_many`` starts
from it (they run in a copy of its context), which also counts the calls that failed inside it.
Prices are not applied here at call time: they change, and a run directory should stay re-priceable. Reports
call ``price_calls`` with a prices table (``configs/llm/prices.yaml``) at report time.
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from allmem.files import CALLS, CONFIG, append_jsonl, read_config_data, read_jsonl
from allmem.types import CallRecord

_FIELDS = (
    "calls",
    "cached",
    "failed",
    "tokens_in",
    "tokens_out",
    "spent_tokens_in",
    "spent_tokens_out",
    "latency_ms",
)


@dataclasses.dataclass
class LocalScope:
    """The ids of one ``Ledger.local_scope`` and what failed inside it (calls with no reply after retries)."""

    ledger: Ledger
    ids: dict[str, Any]
    failed: dict[str, int] = dataclasses.field(default_factory=dict)
    last_error: str | None = None


_LOCAL: contextvars.ContextVar[LocalScope | None] = contextvars.ContextVar(
    "allmem_ledger_scope", default=None
)


class Ledger:
    """Thread-safe; writes one JSON line per call (if it has a path) and keeps running totals."""

    def __init__(self, path: str | Path | None = None, attempt: int | None = None) -> None:
        self.path = Path(path) if path is not None else None  # its folder is made on the first write
        self._lock = threading.Lock()
        self._totals: dict[str, dict[str, Any]] = defaultdict(_empty)
        self._scope: dict[str, Any] = {"attempt": attempt}
        self._failed: dict[str, int] = defaultdict(int)  # calls with no reply after retries, per phase
        self.last_error: str | None = None
        self._tap: list[dict[str, Any]] | None = None

    @contextmanager
    def scope(self, **ids: Any) -> Iterator[None]:
        """Book every call made inside the block with these ids (``dialogue_id``, ``question_id``, ``attempt``)."""
        with self._lock:
            before = dict(self._scope)
            self._scope.update(ids)
        try:
            yield
        finally:
            with self._lock:
                self._scope = before

    @contextmanager
    def local_scope(self, **ids: Any) -> Iterator[LocalScope]:
        """Book the calls of this thread (and of the ``chat_many`` threads it starts) inside the block with these
        ids over the shared scope; other threads are not affected. The scope yielded counts its failed calls."""
        local = LocalScope(self, dict(ids))
        token = _LOCAL.set(local)
        try:
            yield local
        finally:
            _LOCAL.reset(token)

    def record(self, rec: CallRecord, **extra: Any) -> None:
        """Book one call. ``extra`` (template, estimated, ...) goes into the JSON line only."""
        local = _LOCAL.get()
        local = local if local is not None and local.ledger is self else None
        with self._lock:
            scope = self._scope | local.ids if local is not None else self._scope
            rec = dataclasses.replace(
                rec, **{k: v for k, v in scope.items() if getattr(rec, k, None) is None}
            )
            _add(self._totals[rec.phase], rec)
            if rec.error is not None:
                self._failed[rec.phase] += 1
                self.last_error = rec.error
                if local is not None:
                    local.failed[rec.phase] = local.failed.get(rec.phase, 0) + 1
                    local.last_error = rec.error
            line = dataclasses.asdict(rec) | extra
            if self._tap is not None:
                self._tap.append(line)
            if self.path is not None:
                append_jsonl(self.path, line)

    def tap(self) -> None:
        """Keep a copy of every line booked from now until ``untap`` (one tap at a time): the bank cache stores
        a dialogue's ingestion calls this way, so that a run re-using the bank books the same calls."""
        with self._lock:
            self._tap = []

    def untap(self) -> list[dict[str, Any]]:
        """The lines booked since ``tap`` (none if no tap was open); the tap is closed."""
        with self._lock:
            out, self._tap = self._tap or [], None
        return out

    def rebook(self, line: Mapping[str, Any]) -> None:
        """Book again the call a saved line describes, as a reply served from a cache (``cached``, no latency)
        under this ledger's scope: the same call record a fresh ingestion makes, apart from those fields."""
        names = {f.name for f in dataclasses.fields(CallRecord)}
        core = {k: v for k, v in line.items() if k in names and k != "attempt"}
        self.record(
            CallRecord(**core | {"cached": True, "latency_ms": 0.0}),
            **{k: v for k, v in line.items() if k not in names},
        )

    def set_attempt(self, attempt: int) -> None:
        """The run attempt every later call is booked under (``manifest.json`` lists the attempts)."""
        with self._lock:
            self._scope["attempt"] = attempt

    def failures(self) -> dict[str, int]:
        """Calls that got no reply after their retries, per phase, so far (the runner diffs two snapshots)."""
        with self._lock:
            return dict(self._failed)

    def totals(self) -> dict[str, dict[str, Any]]:
        """Per phase: calls, cached, failed, tokens_in/out (every call: what the method consumes, as cost tables
        report it), spent_tokens_in/out (uncached calls only: what this run paid for), latency_ms, by model;
        plus ``all``."""
        with self._lock:
            return _summed({phase: _copy(t) for phase, t in sorted(self._totals.items())})


def totals_of(lines: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``Ledger.totals`` recomputed from ``calls.jsonl`` lines (a whole run, across attempts and processes)."""
    names = {f.name for f in dataclasses.fields(CallRecord)}
    per_phase: dict[str, dict[str, Any]] = defaultdict(_empty)
    for line in lines:
        rec = CallRecord(**{k: v for k, v in line.items() if k in names})
        _add(per_phase[rec.phase], rec)
    return _summed({phase: _copy(t) for phase, t in sorted(per_phase.items())})


def roles_of(lines: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per template (role), from ``calls.jsonl`` lines: ``calls`` (first asks), ``invalid`` (first asks whose
    reply could not be used: it did not parse, or it was repaired), ``repairs`` (repair turns,
    ``allmem.llm.client.LLM.repair``), ``unusable`` (JSON replies still unparsed after the last repair: the
    caller's fallback took over, ATC skipped, a descriptor kept the evidence), ``failed`` (calls with no reply
    after their retries, or never sent), and the rates of ``invalid`` and ``unusable`` over ``calls``. A judge's
    final invalid verdicts are its own (metrics.json ``judge``)."""
    lines = list(lines)
    replaced = {str(line["repair_of"]) for line in lines if line.get("repair_of")}
    out: dict[str, dict[str, Any]] = {}
    for line in lines:
        t = out.setdefault(
            str(line.get("template") or "?"),
            {"calls": 0, "invalid": 0, "repairs": 0, "unusable": 0, "failed": 0},
        )
        first = not line.get("repair")
        bad = line.get("parse_error") is not None
        t["calls"] += first
        t["repairs"] += not first
        t["invalid"] += first and (bad or str(line.get("prompt_hash")) in replaced)
        t["unusable"] += bad and str(line.get("prompt_hash")) not in replaced
        t["failed"] += line.get("error") is not None
    for t in out.values():
        t["invalid_rate"] = t["invalid"] / t["calls"] if t["calls"] else None
        t["unusable_rate"] = t["unusable"] / t["calls"] if t["calls"] else None
    return dict(sorted(out.items()))


def _summed(out: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per-phase totals plus ``all``."""
    total = _empty()
    for t in out.values():
        for f in _FIELDS:
            total[f] += t[f]
        for model, m in t["by_model"].items():
            agg = total["by_model"].setdefault(model, {"calls": 0, "tokens_in": 0, "tokens_out": 0})
            for f in agg:
                agg[f] += m[f]
    out["all"] = total
    return out


def _empty() -> dict[str, Any]:
    return {f: 0 for f in _FIELDS} | {"by_model": {}}


def _copy(t: Mapping[str, Any]) -> dict[str, Any]:
    return {f: t[f] for f in _FIELDS} | {"by_model": {k: dict(v) for k, v in t["by_model"].items()}}


def _add(t: dict[str, Any], rec: CallRecord) -> None:
    t["calls"] += 1
    t["cached"] += int(rec.cached)
    t["failed"] += int(not rec.ok)
    t["latency_ms"] += rec.latency_ms
    t["tokens_in"] += rec.tokens_in
    t["tokens_out"] += rec.tokens_out
    if not rec.cached:
        t["spent_tokens_in"] += rec.tokens_in
        t["spent_tokens_out"] += rec.tokens_out
    m = t["by_model"].setdefault(rec.model, {"calls": 0, "tokens_in": 0, "tokens_out": 0})
    m["calls"] += 1
    m["tokens_in"] += rec.tokens_in
    m["tokens_out"] += rec.tokens_out


def price_calls(
    calls: Iterable[Mapping[str, Any]], prices: Mapping[str, Mapping[str, float]]
) -> dict[str, Any]:
    """USD per phase from a prices table ``{model: {input_per_mtok, output_per_mtok}}``.

    ``usd`` counts uncached calls (what the run spent); ``usd_uncached`` prices every call as if nothing had been
    cached (what a fresh run costs). Offline calls and models missing from the table are listed, not priced.
    """
    out: dict[str, Any] = {"usd": 0.0, "usd_uncached": 0.0, "by_phase": {}, "unpriced_models": []}
    for c in calls:
        model = str(c.get("model", ""))
        price = prices.get(model)
        if price is None or c.get("backend") == "offline":
            if model not in out["unpriced_models"]:
                out["unpriced_models"].append(model)
            continue
        usd = (c["tokens_in"] * price["input_per_mtok"] + c["tokens_out"] * price["output_per_mtok"]) / 1e6
        phase = out["by_phase"].setdefault(c["phase"], {"usd": 0.0, "usd_uncached": 0.0})
        phase["usd_uncached"] += usd
        out["usd_uncached"] += usd
        if not c.get("cached"):
            phase["usd"] += usd
            out["usd"] += usd
    return out


def price_run(run_dir: str | Path, prices: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    """Price a run directory's ``calls.jsonl`` with ``prices``, else the ``llm.prices`` table of its config.yaml."""
    run = Path(run_dir)
    if prices is None:
        cfg = read_config_data(run) if (run / CONFIG).exists() else {}
        prices = (cfg.get("llm") or {}).get("prices") or {}
    return price_calls(read_jsonl(run / CALLS), prices)
