"""Ask points: where in the stream each question is asked (``protocol.ask``; docs/PROTOCOL.md, "Ask points").

``end`` asks every question after the whole stream (the paper's protocol). ``after_evidence`` asks a question at
the end of the session that holds its last evidence turn, or at the stream's end when no turn matches its
evidence. ``both`` asks each question at both points: two records, keyed by (question id, ask point).

Every record also says how far the stream had gone past the question's last evidence turn when it was asked
(``since``: turns and sessions streamed after it), which the retention view bins (``allmem.report.tables.retention``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from allmem.types import ASK_MODES, Dialogue, Question


@dataclass(frozen=True)
class Ask:
    """One question at one ask point: ``session`` is the index of the session it follows (None: the stream's
    end), ``since`` the turns and sessions streamed after its last evidence turn (None: no evidence matched)."""

    question: Question
    point: str
    session: int | None
    since: dict[str, int] | None

    @property
    def key(self) -> tuple[str, str]:
        return (self.question.id, self.point)


def last_evidence(dialogue: Dialogue, question: Question) -> tuple[int, int] | None:
    """(session index, stream position) of the question's last evidence turn; None when none matches. A turn
    matches by its id (``evidence_turns`` when the dataset marks turns, else ``evidence``) or, for datasets whose
    evidence names sessions (LongMemEval without turn marks), by its session (every turn of an evidence session)."""
    ids = set(question.evidence_turns or question.evidence)
    by_session = not question.evidence_turns and question.question_type is not None
    found, pos = None, 0
    for s, session in enumerate(dialogue.sessions):
        for turn in session.turns:
            if turn.id in ids or turn.source_id in ids or (by_session and turn.session_id in ids):
                found = (s, pos)
            pos += 1
    return found


def plan(dialogue: Dialogue, todo: Iterable[tuple[Question, str]]) -> list[Ask]:
    """Where each (question, ask point) pair is asked, in the given order."""
    ends: list[int] = []  # turns streamed by the end of each session
    for session in dialogue.sessions:
        ends.append((ends[-1] if ends else 0) + len(session.turns))
    last_session = len(dialogue.sessions) - 1
    out = []
    for question, point in todo:
        if point not in ASK_MODES["both"]:
            raise ValueError(f"unknown ask point {point!r}")
        ev = last_evidence(dialogue, question)
        session = ev[0] if point == "after_evidence" and ev is not None else None
        since = None
        if ev is not None:
            at = last_session if session is None else session
            since = {"turns": ends[at] - (ev[1] + 1), "sessions": at - ev[0]} if ends else None
        out.append(Ask(question, point, session, since))
    return out


def todo(questions: Iterable[Question], mode: str, done: set[tuple[str, str]]) -> list[tuple[Question, str]]:
    """The (question, ask point) pairs of ``mode`` (``protocol.ask``) not answered yet, question by question."""
    return [(q, p) for q in questions for p in ASK_MODES[mode] if (q.id, p) not in done]
