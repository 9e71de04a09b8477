"""The data contracts every stage agrees on.

Only the loaders in ``benchmarks/`` touch raw dataset dicts; everything downstream sees these frozen
dataclasses. Memory systems receive ``Turn`` and ``SessionInfo`` objects and a query string: they never see a
``Question`` (it carries the gold answer and evidence).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any


def format_date(ts: datetime) -> str:
    """``8 May 2023``: how a date is written in contexts and answers (LoCoMo's gold answers use this form)."""
    return f"{ts.day} {ts:%B} {ts.year}"


def utterance_line(speaker: str | None, text: str, caption: str | None = None) -> str:
    """``Speaker: text [image: caption]``: the one way an utterance is written as text.

    Every text-based method indexes this form, prompts show it, and the generator's context lines are built
    from it; nothing parses it back (a ``Retrieved`` unit carries its parts).
    """
    out = f"{speaker}: {text}" if speaker else text
    if caption:
        out += f" [image: {caption}]"
    return out


@dataclass(frozen=True)
class Turn:
    """One utterance of a dialogue, the unit of ingestion.

    ``id`` is the benchmark's evidence id where the benchmark scores turns (LoCoMo ``dia_id`` such as ``D3:5``);
    ``source_id`` is the id retrieval metrics credit, a turn id on every dataset (LoCoMo ``D3:5``, LongMemEval
    ``<session id>:<turn index>``, credited to its session where the gold names sessions).
    """

    id: str
    session_id: str
    speaker: str
    text: str
    timestamp: datetime
    order: int  # position in the chronological stream of its dialogue, 0-based
    caption: str | None = None  # LoCoMo image turns: blip_caption
    role: str | None = None  # LongMemEval: "user" | "assistant"
    source_id: str = ""

    def render(self) -> str:
        """``Speaker: text [image: caption]``: the text every text-based method indexes."""
        return utterance_line(self.speaker, self.text, self.caption)

    def utterance(self) -> Utterance:
        return Utterance(self.speaker, self.text, self.caption)


@dataclass(frozen=True)
class SessionInfo:
    """A session boundary, as a memory system sees it."""

    id: str
    date: datetime
    index: int  # chronological position within the dialogue


@dataclass(frozen=True)
class Session:
    id: str
    date: datetime
    index: int
    turns: tuple[Turn, ...]

    @property
    def info(self) -> SessionInfo:
        return SessionInfo(self.id, self.date, self.index)


@dataclass(frozen=True)
class Question:
    """A benchmark question. Holds gold data: never passed to a memory system."""

    id: str
    dialogue_id: str
    text: str
    gold: str
    evidence: tuple[str, ...]
    category: int | None = None  # LoCoMo 1..5 (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adv.)
    question_type: str | None = None  # LongMemEval question_type
    date: datetime | None = None  # the "current time" of the question (LongMemEval question_date)
    evidence_turns: tuple[str, ...] = ()  # LongMemEval: the turns marked has_answer (evidence holds sessions)

    @property
    def group(self) -> str:
        """Key for per-category / per-type aggregation."""
        return str(self.category) if self.category is not None else str(self.question_type)


@dataclass(frozen=True)
class Dialogue:
    """One memory stream and the questions asked about it. Sessions are in chronological order."""

    id: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    speakers: tuple[str, ...] = ()
    source: str = ""  # file the dialogue was read from

    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]


@dataclass(frozen=True)
class Utterance:
    """One piece of a retrieved unit: who said what, with the image caption if any.

    A turn-level unit has one; an All-Mem unit merged by consolidation has one per evidence record; a memory
    system that stores rewritten facts (Mem0, A-Mem notes) returns the fact as ``text`` with no speaker.
    """

    speaker: str | None
    text: str
    caption: str | None = None

    def render(self) -> str:
        return utterance_line(self.speaker, self.text, self.caption)


@dataclass(frozen=True)
class Retrieved:
    """One ranked unit returned by a memory system. ``source_ids`` are what R@k/N@k credit.

    The unit carries its parts (``parts``, ``timestamp``); ``text`` and ``allmem.budget.context_line`` render
    them, so no consumer has to parse a rendered line back into speaker, text and caption.
    """

    id: str
    parts: tuple[Utterance, ...]
    source_ids: tuple[str, ...]
    score: float
    timestamp: datetime | None = None

    @classmethod
    def of_text(
        cls, id: str, text: str, source_ids: tuple[str, ...], score: float, timestamp: datetime | None = None,
        speaker: str | None = None, caption: str | None = None,
    ) -> Retrieved:  # fmt: skip
        """A unit of one utterance (the common case)."""
        return cls(id, (Utterance(speaker, text, caption),), tuple(source_ids), float(score), timestamp)

    @property
    def text(self) -> str:
        """The unit's utterances, one ``Speaker: text [image: caption]`` line each."""
        return "\n".join(p.render() for p in self.parts)

    @property
    def speaker(self) -> str | None:
        """The speaker when every part has the same one, else None."""
        speakers = {p.speaker for p in self.parts}
        return speakers.pop() if len(speakers) == 1 else None


@dataclass(frozen=True)
class RetrievalResult:
    units: tuple[Retrieved, ...]
    timings_ms: dict[str, float] = field(default_factory=dict)  # per stage, e.g. embed, stage1, stage2


@dataclass(frozen=True)
class AnswerRequest:
    """What the answer generator sees: the question without its gold, plus the packed context.

    ``options`` is set for two-option questions (LoCoMo category 5 under protocol ``allmem``): the harness builds
    it from "Not mentioned in the conversation" and the gold, order shuffled with a fixed seed.
    ``context`` is chronological (already packed under the budget); ``context_text`` holds one line per unit,
    ``[date] Speaker: text``. ``template`` names the answer prompt the run's protocol chose
    (``Protocol.answer_template``); empty means the default protocol's choice.
    """

    question_id: str
    question: str
    category: int | None = None
    question_type: str | None = None
    date: datetime | None = None
    options: tuple[str, ...] = ()
    context: tuple[Retrieved, ...] = ()
    context_text: str = ""
    template: str = ""


@dataclass(frozen=True)
class Answer:
    text: str
    usage: dict[str, Any] = field(default_factory=dict)  # tokens_in, tokens_out, cached, ...
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. the unit the answer came from


class RecordError(ValueError):
    """A record (a line of a run file) that cannot be read or scored; the message names where it is."""


# The version of the records a run writes (``Prediction``, ``CallRecord``, system stats, ATC events). Bump it once
# per change of fields, here, with the change; every attempt's manifest entry records it (``records``), so a
# reader can tell which fields a run's files hold. docs/DESIGN.md keeps the history.
RECORD_VERSION = 6  # 2: ranked_units, evidence_turns; latency_ms retrieve_search, query_embed; turn_write_ms; 3: ATC edit texts
# 4: ask point (``Prediction.ask``, ``Prediction.since``)
# 5: packed contexts (contexts.jsonl.gz)
# 6: LongMemEval's source ids are turn ids (``<session id>:<turn index>``) in ranked ids, units and contexts
# Where a question is asked (allmem.run.asking; a record without ``ask``: end), and the points of each protocol.ask.
ASK_POINTS = ("end", "after_evidence")
ASK_MODES = {"end": ("end",), "after_evidence": ("after_evidence",), "both": ("after_evidence", "end")}


def record_key(record: Mapping[str, Any]) -> tuple[str, Any, Any]:
    """(dialogue id, question id, ask point): what tells one record of a run from another, and the key of its
    packed context (``contexts.jsonl.gz``) and of a judge's verdict (``allmem judge``); the one place it is
    built. A record naming no ask point was asked at the end (a predictions file ``allmem score`` reads need
    not say)."""
    return record.get("dialogue_id") or "", record.get("question_id"), record.get("ask") or "end"


@dataclass(frozen=True)
class AnswerInfo:
    """Where an answer came from: the prompt (template, hash: the key of ``calls.jsonl`` and of the response
    cache), whether it was served from the cache, and what went wrong (``error``: no reply at all, e.g. a
    transport failure after retries; ``parse_error``: a reply that was not the JSON asked for, kept as text)."""

    template: str | None = None
    prompt_hash: str | None = None
    cached: bool | None = None
    error: str | None = None
    parse_error: str | None = None

    @classmethod
    def of(cls, answer: Answer) -> AnswerInfo:
        """From a generator's ``Answer`` (``usage`` and ``extra`` as ``allmem.reader`` fills them)."""
        usage, extra = answer.usage, answer.extra
        cached = usage.get("cached")
        return cls(
            template=usage.get("template"),
            prompt_hash=usage.get("prompt_hash"),
            cached=None if cached is None else bool(cached),
            error=extra.get("error"),
            parse_error=extra.get("parse_error"),
        )


@dataclass(frozen=True)
class Prediction:
    """One line of ``predictions.jsonl``: written by the runner (``to_json``), read and validated by the scorer
    (``from_json``), the one definition of the record (docs/DESIGN.md lists the fields).

    ``error`` is set when the question failed (an answer, judge, retrieval or ingest call of it failed after its
    retries): such a line is not a result, the question is asked again on the next run, and no scorer counts it.
    ``attempt`` is the run attempt that wrote the line (``manifest.json`` lists the attempts).
    """

    question_id: str
    dialogue_id: str
    question: str
    prediction: str
    gold: str
    evidence: tuple[str, ...]
    ranked_source_ids: tuple[str, ...]
    category: int | None = None
    question_type: str | None = None
    options: tuple[str, ...] = ()
    context_tokens: int = 0
    dropped_tokens: int = 0
    context_units: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)
    answer: AnswerInfo = field(default_factory=AnswerInfo)
    judge: dict[str, Any] | None = None
    error: str | None = None
    attempt: int = 1
    ranked_units: tuple[tuple[str, ...], ...] = ()  # the source ids of each of the top units (unit precision)
    evidence_turns: tuple[str, ...] = ()  # LongMemEval: has_answer turn ids (``evidence`` holds sessions)
    ask: str = "end"  # the ask point (ASK_POINTS); with protocol.ask=both a question has a record per point
    since: dict[str, int] | None = None  # turns / sessions streamed after the last evidence turn when asked
    # the packed context (``text``, ``units``: id and source ids of each packed unit): the runner writes it to
    # contexts.jsonl.gz with the record's key, never into predictions.jsonl (not in ``to_json``)
    packed: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[str, str, str]:
        """What identifies a record in a run: (dialogue, question, ask point)."""
        return (self.dialogue_id, self.question_id, self.ask)

    @property
    def verdict(self) -> str | None:
        return None if self.judge is None else self.judge.get("verdict")

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the line; optional fields appear only when set."""
        out: dict[str, Any] = {
            "question_id": self.question_id,
            "dialogue_id": self.dialogue_id,
            "question": self.question,
            "prediction": self.prediction,
            "gold": self.gold,
            "evidence": list(self.evidence),
            "ranked_source_ids": list(self.ranked_source_ids),
            "context_tokens": self.context_tokens,
            "dropped_tokens": self.dropped_tokens,
            "context_units": self.context_units,
            "latency_ms": dict(self.latency_ms),
            "answer": {k: v for k, v in vars(self.answer).items() if v is not None},
            "attempt": self.attempt,
        }
        if self.category is not None:
            out["category"] = self.category
        if self.question_type is not None:
            out["question_type"] = self.question_type
        if self.options:
            out["options"] = list(self.options)
        if self.judge is not None:
            out["judge"] = dict(self.judge)
        if self.error is not None:
            out["error"] = self.error
        if self.ranked_units:
            out["ranked_units"] = [list(u) for u in self.ranked_units]
        if self.evidence_turns:
            out["evidence_turns"] = list(self.evidence_turns)
        out["ask"] = self.ask
        if self.since is not None:
            out["since"] = dict(self.since)
        return out

    @classmethod
    def from_json(cls, raw: Any, where: str = "record") -> Prediction:
        """Check one line and build the record; errors name ``where`` and the field. Files written before the
        provenance fields existed read too (no ``answer``, ``attempt`` or ``error``); a ``verdict`` key (an
        already-normalised record) stands for ``judge.verdict``."""
        if not isinstance(raw, Mapping):
            raise RecordError(f"{where}: expected a JSON object, got {type(raw).__name__}")
        qid = raw.get("question_id")
        if not isinstance(qid, str) or not qid:
            raise RecordError(f"{where}: field 'question_id' must be a non-empty string, got {qid!r}")
        category = raw.get("category")
        if category is not None:
            if isinstance(category, str) and category.isdigit():
                category = int(category)
            if isinstance(category, bool) or not isinstance(category, int) or not 1 <= category <= 5:
                raise RecordError(
                    f"{where}: field 'category' must be a LoCoMo category 1..5, got {category!r}"
                )
        qtype = raw.get("question_type")
        if qtype is not None and not isinstance(qtype, str):
            raise RecordError(f"{where}: field 'question_type' must be a string, got {qtype!r}")
        if category is None and not qtype:
            raise RecordError(f"{where}: needs field 'category' (LoCoMo) or 'question_type' (LongMemEval)")
        judge = raw.get("judge")
        if judge is not None and (not isinstance(judge, Mapping) or judge.get("verdict") not in VERDICTS):
            raise RecordError(f"{where}: field 'judge' must be {{'verdict': 'yes'|'no'|'invalid', ...}}")
        if judge is None and raw.get("verdict") is not None:
            if raw["verdict"] not in VERDICTS:
                raise RecordError(
                    f"{where}: field 'verdict' must be one of {VERDICTS}, got {raw['verdict']!r}"
                )
            judge = {"verdict": raw["verdict"]}
        dialogue_id = raw.get("dialogue_id")
        if dialogue_id is not None and not isinstance(dialogue_id, str):
            raise RecordError(f"{where}: field 'dialogue_id' must be a string, got {dialogue_id!r}")
        error = raw.get("error")
        if error is not None and not isinstance(error, str):
            raise RecordError(f"{where}: field 'error' must be a string, got {error!r}")
        answer = raw.get("answer") or {}
        if not isinstance(answer, Mapping):
            raise RecordError(f"{where}: field 'answer' must be an object, got {type(answer).__name__}")
        known = {f.name for f in fields(AnswerInfo)}
        ask = record_key(raw)[2]
        if ask not in ASK_POINTS:
            raise RecordError(f"{where}: field 'ask' must be one of {ASK_POINTS}, got {ask!r}")
        since = raw.get("since")
        if since is not None and (
            not isinstance(since, Mapping)
            or set(since) != {"turns", "sessions"}
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in since.values())
        ):
            raise RecordError(f"{where}: field 'since' must be {{'turns': n, 'sessions': m}} (n, m >= 0)")
        return cls(
            question_id=qid,
            dialogue_id=dialogue_id or "",
            question=str(raw.get("question", "")),
            prediction=_text(raw, "prediction", where),
            gold=_text(raw, "gold", where),
            evidence=_ids(raw, "evidence", where),
            ranked_source_ids=_ids(raw, "ranked_source_ids", where),
            category=category,
            question_type=qtype,
            options=tuple(str(o) for o in raw.get("options") or ()),
            context_tokens=_int(raw, "context_tokens", where),
            dropped_tokens=_int(raw, "dropped_tokens", where),
            context_units=_int(raw, "context_units", where),
            latency_ms=dict(raw.get("latency_ms") or {}),
            answer=AnswerInfo(**{k: v for k, v in answer.items() if k in known}),
            judge=dict(judge) if judge is not None else None,
            error=error,
            attempt=_int(raw, "attempt", where, default=1),
            ranked_units=_units(raw, where),
            evidence_turns=_ids(raw, "evidence_turns", where)
            if raw.get("evidence_turns") is not None
            else (),
            ask=ask,
            since=dict(since) if since is not None else None,
        )

    def scoring_view(self) -> dict[str, Any]:
        """The fields a protocol scores, as a plain dict (``allmem.metrics.protocols``)."""
        return {
            "question_id": self.question_id,
            "dialogue_id": self.dialogue_id,
            "category": self.category,
            "question_type": self.question_type,
            "question": self.question,
            "prediction": self.prediction,
            "gold": self.gold,
            "evidence": list(self.evidence),
            "ranked_source_ids": list(self.ranked_source_ids),
            "verdict": self.verdict,
            "ranked_units": [list(u) for u in self.ranked_units],
            "evidence_turns": list(self.evidence_turns),
            "ask": self.ask,
            "since": None if self.since is None else dict(self.since),
        }


VERDICTS = ("yes", "no", "invalid")


def _units(raw: Mapping[str, Any], where: str) -> tuple[tuple[str, ...], ...]:
    """``ranked_units``: a list of lists of source ids (absent in records written before version 2)."""
    val = raw.get("ranked_units")
    if val is None:
        return ()
    if not isinstance(val, list) or not all(
        isinstance(u, list) and all(isinstance(i, str) for i in u) for u in val
    ):
        raise RecordError(f"{where}: field 'ranked_units' must be a list of lists of ids")
    return tuple(tuple(u) for u in val)


def _text(raw: Mapping[str, Any], key: str, where: str) -> str:
    """A text field; numbers are cast (six LoCoMo golds are integers), anything else is an error."""
    if key not in raw:
        raise RecordError(f"{where}: missing field {key!r}")
    val = raw[key]
    if isinstance(val, bool) or not isinstance(val, str | int | float):
        raise RecordError(f"{where}: field {key!r} must be a string, got {type(val).__name__}")
    return str(val)


def _ids(raw: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    if key not in raw:
        raise RecordError(f"{where}: missing field {key!r}")
    val = raw[key]
    if not isinstance(val, list | tuple) or not all(isinstance(i, str) for i in val):
        raise RecordError(f"{where}: field {key!r} must be a list of strings, got {val!r:.80}")
    return tuple(val)


def _int(raw: Mapping[str, Any], key: str, where: str, default: int = 0) -> int:
    val = raw.get(key, default)
    if isinstance(val, bool) or not isinstance(val, int):
        raise RecordError(f"{where}: field {key!r} must be an integer, got {val!r}")
    return val


@dataclass(frozen=True)
class CallRecord:
    """One LLM call, as the cost ledger stores it (``calls.jsonl``).

    ``ok`` is false for a call that produced no usable reply (``error``: a transport failure after its retries)
    or an unreadable one (``parse_error`` in the line). ``dialogue_id``/``question_id`` say which work it served
    (``question_id`` is None for ingestion: writes and consolidation); ``attempt`` is the run attempt that made
    it (``manifest.json``). The ledger fills these three from its scope, so callers need not pass them.
    """

    phase: str  # write | retrieve | diagnose | plan_split | plan_merge | plan_update | generate | judge
    backend: str
    model: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    cached: bool
    prompt_hash: str
    ok: bool = True
    error: str | None = None
    dialogue_id: str | None = None
    question_id: str | None = None
    attempt: int | None = None
