"""The per-dialogue pipeline: build a run's components (from ``allmem.build``), stream a dialogue into its memory
system, ask its questions (retrieve → pack → generate → judge), write one prediction line each; and seal a
finished run directory.

The runner (``allmem.run.runner``) runs it in process, the workers (``allmem.run.parallel``) in theirs, and the
last shard to finish (``allmem.run.shards``) seals with it. The runner imports parallel and shards; they import
this module, never the runner, so the run package has no import circle (tests/test_layering.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from tqdm.auto import tqdm

from allmem import files
from allmem.budget import Filling, pack
from allmem.build import build, build_embedder, build_run_llm, checked
from allmem.metrics import dataset_for, score_records
from allmem.metrics.judge import invalid_warning
from allmem.metrics.protocols import Protocol
from allmem.metrics.retrieval import kept_ranking, rank_source_ids
from allmem.run import asking, attempts, questions
from allmem.run import timing as timers
from allmem.systems import MemorySystem, Resources
from allmem.types import AnswerInfo, AnswerRequest, Dialogue, Prediction, Question

log = logging.getLogger("allmem.run")


# Ranked (turn) ids kept per question: at least this many, and more until they span max(ks) sessions.
MAX_RANKED_IDS = 100


def ingest(
    system: MemorySystem, dialogue: Dialogue, progress: bool,
    ask_at: Mapping[int, Callable[[], Any]] | None = None,
) -> dict[str, float]:  # fmt: skip
    """Stream a dialogue chronologically; return write timings. ``ask_at`` (``protocol.ask`` other than end):
    after session ``i`` ends, ``system.checkpoint()`` (timed as writing), then ``ask_at[i]()`` answers the
    questions asked there (not timed as writing)."""
    system.reset(dialogue.id)
    n_turns = sum(len(s.turns) for s in dialogue.sessions)
    bar = tqdm(total=n_turns, desc=f"ingest {dialogue.id}", unit="turn", disable=not progress, leave=False)
    turn_ms: list[float] = []  # each ingest call, for the tail percentiles of Table 2 (run/timing.py)
    session_ms: list[float] = []  # each end_session call, likewise
    asked_s = 0.0  # time spent answering mid-stream questions, taken out of the write time
    t0 = time.perf_counter()
    for i, session in enumerate(dialogue.sessions):
        system.start_session(session.info)
        for turn in session.turns:
            t_turn = time.perf_counter()
            system.ingest(turn)
            turn_ms.append(round(1000 * (time.perf_counter() - t_turn), 4))
            bar.update(1)
        t_session = time.perf_counter()
        system.end_session(session.info)  # where a buffering method writes what its turns held back
        session_ms.append(round(1000 * (time.perf_counter() - t_session), 4))
        if ask_at and i in ask_at:
            system.checkpoint()
            t_ask = time.perf_counter()
            ask_at[i]()
            asked_s += time.perf_counter() - t_ask
    t_end = time.perf_counter()
    system.end_stream()
    t_stream = time.perf_counter()
    bar.close()
    return {
        "turns": n_turns,
        "ingest_s": t_end - t0 - asked_s,
        "end_stream_s": t_stream - t_end,
        "write_ms_per_turn": 1000 * (t_end - t0 - asked_s) / max(n_turns, 1),
        "turn_write_ms": turn_ms,
        "session_end_ms": session_ms,
    }


def answer_question(
    system: MemorySystem, generator: Any, question: Question, budget_tokens: int, seed: int,
    judge: Callable[[dict[str, Any]], dict[str, Any] | None] | None, protocol: Protocol, attempt: int = 1,
    embedder: Any = None,
) -> Prediction:  # fmt: skip
    """One question through retrieve → pack → generate (→ judge); returns its predictions.jsonl record.

    The protocol frames the question (two options or not) and names the answer template. A failed answer or
    judge call (no reply after retries) makes a failed record (``error`` set), never an empty answer.
    """
    with timers.watch(embedder) as embedded:  # the query embedding, taken out of the search time
        t0 = time.perf_counter()
        result = system.retrieve(question.text, question.date)
        t1 = time.perf_counter()
    packed = pack(result.units, budget_tokens)
    options = protocol.options(question, seed)
    request = AnswerRequest(
        question_id=question.id,
        question=question.text,
        category=question.category,
        question_type=question.question_type,
        date=question.date,
        options=options,
        context=tuple(packed.units),
        context_text=packed.text,
    )
    request = replace(request, template=protocol.answer_template(request))
    t2 = time.perf_counter()
    answer = generator.answer(request)
    t3 = time.perf_counter()
    latency = {k: float(v) for k, v in result.timings_ms.items()}
    latency.update(retrieve=1000 * (t1 - t0), pack=1000 * (t2 - t1), generate=1000 * (t3 - t2))
    latency["retrieve_search"] = max(0.0, latency["retrieve"] - embedded.ms)
    if (query_ms := timers.model_ms(embedder, embedded.texts)) is not None:
        latency["query_embed"] = query_ms
    info = AnswerInfo.of(answer)
    pred = Prediction(
        question_id=question.id,
        dialogue_id=question.dialogue_id,
        question=question.text,
        prediction=answer.text,
        gold=question.gold,
        evidence=question.evidence,
        ranked_source_ids=tuple(
            kept_ranking(rank_source_ids(result.units), max(MAX_RANKED_IDS, *protocol.ks), max(protocol.ks))
        ),
        ranked_units=tuple(tuple(u.source_ids) for u in result.units[: max(protocol.ks)]),  # unit precision
        evidence_turns=question.evidence_turns,
        category=question.category,
        question_type=question.question_type,
        options=options,
        context_tokens=packed.used_tokens,
        dropped_tokens=packed.dropped_tokens,
        context_units=len(packed.units),
        latency_ms=latency,
        answer=info,
        error=None if info.error is None else f"answer: {info.error}",
        attempt=attempt,
        packed={
            "text": packed.text,
            "units": [{"id": u.id, "source_ids": list(u.source_ids)} for u in packed.units],
        },
    )
    if judge is not None and pred.error is None:
        verdict = judge(pred.to_json())
        if verdict is not None:
            err = verdict.get("error")
            pred = replace(pred, judge=verdict, error=None if err is None else f"judge: {err}")
    return pred


def seal(run_dir: Path, records: list[dict[str, Any]], protocol: Protocol, info: dict[str, Any]) -> None:
    """Score a run's records and seal its directory: ``metrics.json``, then ``DONE``. ``info``: ``label``,
    ``config_hash``, ``attempts``, ``backend``, ``inputs``, ``wall_s_last_session``."""
    metrics = score_records(records, protocol, dataset_for(run_dir))  # + the dataset's answer-key errata
    if warning := invalid_warning(metrics, str(run_dir)):  # allmem.metrics.judge.INVALID_WARN_RATE
        log.warning(warning)
    metrics["run"] = {k: info[k] for k in ("label", "config_hash", "attempts")}
    metrics["backend"] = info["backend"]
    metrics |= attempts.run_cost(run_dir)
    metrics["inputs"] = info["inputs"]
    metrics["system"] = _system_summary(files.read_jsonl(run_dir / files.SYSTEM_STATS))
    metrics["wall_s_last_session"] = info["wall_s_last_session"]
    files.write_json(run_dir / files.METRICS, metrics)
    files.write_atomic(run_dir / files.DONE, "complete\n")


def answer_dialogue(
    cfg: DictConfig, svc: Services, protocol: Protocol, judge: Callable[[dict[str, Any]], dict[str, Any] | None]
    | None, dialogue: Dialogue, todo: list[tuple[Question, str]], attempt: int, out: files.JsonlWriter,
    stats_out: files.JsonlWriter, answered: Callable[[int], Any] = lambda n: None, *,
    contexts_out: files.JsonlWriter,
) -> None:  # fmt: skip
    """One dialogue: ingest it (one ``system_stats.jsonl`` line) and answer ``todo`` ((question, ask point)
    pairs; a prediction line each, ``answered(1)`` after each, its packed context's ``contexts.jsonl.gz`` line
    written just before it, so a kill between the two leaves a context the resume drops, never a record without
    its context), each at its ask point (``allmem.run.asking``):
    mid-stream ones after their session, the rest after ``end_stream``. The in-process loop and every worker
    process (``allmem.run.parallel``) run this; ``CircuitOpen`` propagates."""
    ledger = svc.ledger
    before = _failures(ledger)
    # budget.fill (the equal-context view): each retrieval deepened until its packed context fills the budget
    system = Filling(svc.system, int(cfg.budget.tokens)) if cfg.budget.get("fill") else svc.system
    asks = asking.plan(dialogue, todo)
    by_session: dict[int, list[asking.Ask]] = {}
    for a in asks:
        if a.session is not None:
            by_session.setdefault(a.session, []).append(a)

    def ask(batch: list[asking.Ask]) -> None:
        broke = _new_failures(ledger, before)  # failures of ingestion only: answering's are taken out below
        snap = _failures(ledger)
        if broke:  # its memory is incomplete: do not pay for answers that cannot count
            preds: Iterable[Prediction] = (
                failed_record(a.question, f"ingest of {dialogue.id}: {broke}", attempt) for a in batch
            )
        else:  # concurrently up to llm.max_concurrency, yielded in question order
            preds = questions.answer_questions(
                [a.question for a in batch], lambda q, system, generator: answer_question(
                    system, generator, q, int(cfg.budget.tokens), int(cfg.run.seed), judge, protocol, attempt,
                    embedder=svc.embedder,
                ), system=system, generator=svc.generator, llm=svc.llm,
            )  # fmt: skip
        for a, pred in zip(batch, preds, strict=False):
            if pred.packed is not None:
                key = {"dialogue_id": pred.dialogue_id, "question_id": pred.question_id, "ask": a.point}
                contexts_out.write(key | pred.packed)
            out.write(replace(pred, ask=a.point, since=a.since).to_json())
            answered(1)
        # a failed answer is its own record's error, not a failure of ingestion
        for phase, n in _failures(ledger).items():
            before[phase] = before.get(phase, 0) + n - snap.get(phase, 0)

    ask_at = {s: (lambda b=batch: ask(b)) for s, batch in by_session.items()}
    looked_up = _embed_counts(svc.embedder)
    with ledger_scope(svc.llm, dialogue_id=dialogue.id):
        timing = ingest(svc.system, dialogue, bool(cfg.run.progress), ask_at)
    stats_out.write({
        "dialogue_id": dialogue.id, "attempt": attempt, **timing, **svc.system.stats(),
        "embedding_cache": _embed_counts(svc.embedder, since=looked_up),
    })  # fmt: skip
    ask([a for a in asks if a.session is None])


def _embed_counts(embedder: Any, since: dict[str, int] | None = None) -> dict[str, int]:
    """Texts the embedder was asked for and texts its model computed (the rest came from its store), since
    ``since``: how much of a dialogue's embedding the shared store spared (cache state, never compared)."""
    hits, misses = int(getattr(embedder, "hits", 0)), int(getattr(embedder, "misses", 0))
    start = since or {"texts": 0, "embedded": 0}
    return {"texts": hits + misses - start["texts"], "embedded": misses - start["embedded"]}


def failed_record(question: Question, error: str, attempt: int) -> Prediction:
    """The record of a question that could not be answered: no prediction, the reason, nothing scored."""
    return Prediction(
        question_id=question.id, dialogue_id=question.dialogue_id, question=question.text, prediction="",
        gold=question.gold, evidence=question.evidence, ranked_source_ids=(), category=question.category,
        question_type=question.question_type, error=error, attempt=attempt,
    )  # fmt: skip


def _failures(ledger: Any) -> dict[str, int]:
    return ledger.failures() if ledger is not None else {}


def _new_failures(ledger: Any, before: dict[str, int]) -> str | None:
    """``"2 write calls failed (last: ...)"`` for calls that failed after their retries since ``before``."""
    if ledger is None:
        return None
    now = ledger.failures()
    return questions.failure_line(
        {phase: n - before.get(phase, 0) for phase, n in now.items()}, ledger.last_error
    )


class Services:
    """The components a run uses, built before its directory exists (building checks their arguments)."""

    def __init__(self, run_dir: Path, llm: Any, embedder: Any, generator: Any, system: MemorySystem) -> None:
        self.run_dir, self.llm, self.embedder, self.generator, self.system = (
            run_dir,
            llm,
            embedder,
            generator,
            system,
        )
        self.ledger = getattr(llm, "ledger", None)

    @classmethod
    def build(cls, cfg: DictConfig, run_dir: Path, embedder: Any = None) -> Services:
        """Every component, the ledger and the system's own files in ``run_dir``; ``embedder``: one already
        built (a worker process keeps one for all its dialogues)."""
        if embedder is None:
            embedder = build_embedder(cfg)
        llm = build_run_llm(cfg, run_dir)
        resources = Resources(embedder=embedder, llm=llm, run_dir=run_dir)
        generator = checked("generator", lambda: build(cfg.generator, embedder=embedder, llm=llm))
        per_run = {  # a bank cache holds whole streams: off when a question is asked mid-stream
            "bank_cache": cfg.run.bank_cache if cfg.protocol.get("ask", "end") == "end" else None,
            "probe_queries": cfg.run.probe_queries,
        }  # to methods taking them
        system = checked("method", lambda: build(cfg.method, resources=resources, **per_run))
        return cls(run_dir, llm, embedder, generator, system)


def ledger_scope(llm: Any, **scope: Any) -> Any:
    """Book the LLM calls made inside the block under these ids (``calls.jsonl`` lines say what they served)."""
    ledger = getattr(llm, "ledger", None)
    return ledger.scope(**scope) if ledger is not None else nullcontext()


def judge_fn(
    cfg: DictConfig, llm: Any, protocol: Protocol
) -> Callable[[dict[str, Any]], dict[str, Any] | None] | None:
    """The LLM judge, when enabled and the backend can judge (the offline backend cannot: 4o-J stays null)."""
    if not cfg.run.judge or not llm.backend.can_judge:
        return None
    from allmem.metrics.judge import judge_record

    return lambda record: judge_record(llm, record, protocol)


def _system_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-dialogue system stats (one line per dialogue: a resumed attempt drops the lines it re-ingests)."""
    by_dialogue: dict[str, dict[str, Any]] = {}
    for row in rows:
        by_dialogue[row["dialogue_id"]] = row
    return {"per_dialogue": by_dialogue}
