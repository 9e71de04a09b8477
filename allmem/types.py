"""The data contracts every stage agrees on.

Only the loaders in ``benchmarks/`` touch raw dataset dicts; everything downstream sees these frozen
dataclasses. Memory systems receive ``Turn`` and ``SessionInfo`` objects and a query string: they never see a
``Question`` (it carries the gold answer and evidence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    ``source_id`` is the id retrieval metrics credit (turn id on LoCoMo, session id on LongMemEval).
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


@dataclass(frozen=True)
class Prediction:
    """One line of ``predictions.jsonl``."""

    question_id: str
    dialogue_id: str
    question: str
    prediction: str
    gold: str
    evidence: tuple[str, ...]
    ranked_source_ids: tuple[str, ...]
    category: int | None = None
    question_type: str | None = None
    context_tokens: int = 0
    dropped_tokens: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CallRecord:
    """One LLM call, as the cost ledger stores it (``calls.jsonl``)."""

    phase: str  # write | diagnose | plan_split | plan_merge | plan_update | generate | judge
    backend: str
    model: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    cached: bool
    prompt_hash: str
    ok: bool = True
