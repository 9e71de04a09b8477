"""LongMemEval-s (Wu et al., ICLR 2025) → ``Dialogue``s, one per question.

Each LongMemEval question carries its own haystack of ~50 sessions, so every question is its own memory stream:
``Dialogue.id == Question.id == question_id``. Every turn has a stable id, ``<session_id>:<turn
index>`` (its place in its session, from 0), which is also its ``source_id``: every method's units carry the turns
they came from, so retrieval is measured at turn level against the turns marked ``has_answer`` (the question's
``evidence_turns``) and at session level, as the benchmark scores it (``answer_session_ids``), by crediting each
ranked turn to its session (``allmem.metrics.retrieval.session_of``). Sessions
are sorted by their ``haystack_dates`` (the official ``_s`` file is already sorted; the oracle file is not), ties
kept in file order. Abstention questions (ids ending ``_abs``) load
like any other; scorers recognise them by the id.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Sequence
from datetime import datetime
from itertools import islice
from os import PathLike
from pathlib import Path
from typing import Any, BinaryIO, overload

from allmem.types import Dialogue, Question, Session, Turn
from benchmarks.errors import DatasetError, Where, iter_json_array

log = logging.getLogger(__name__)

_DATE_RE = re.compile(r"\s*(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]{3}\))?\s*(\d{1,2}):(\d{2})\s*")
_SPEAKERS = {"user": "User", "assistant": "Assistant"}


def parse_longmemeval_date(text: str) -> datetime:
    """``2023/05/30 (Tue) 23:40`` → ``datetime(2023, 5, 30, 23, 40)``; the weekday is informative only."""
    m = _DATE_RE.fullmatch(text)
    if not m:
        raise ValueError(f"cannot parse date {text!r}")
    try:
        return datetime(*(int(g) for g in m.groups()))
    except ValueError:
        raise ValueError(f"cannot parse date {text!r}") from None


def load_longmemeval(path: str | PathLike[str], *, limit: int | None = None) -> LongMemEvalFile:
    """The questions of a LongMemEval file (a JSON list of question records, the official format), or the first
    ``limit``, as a ``LongMemEvalFile``: every record is read and checked now (a bad file fails before a run
    starts), but only byte spans are kept and a Dialogue is decoded again each time it is used."""
    path = Path(path)
    spans = tuple((start, end) for _, start, end in islice(_records(path), limit))
    return LongMemEvalFile(path, spans, _stamp(path))


def iter_longmemeval(path: str | PathLike[str]) -> Iterator[Dialogue]:
    """The questions of a LongMemEval file as ``Dialogue``s, one at a time, without holding the file's text."""
    for dialogue, _, _ in _records(Path(path)):
        yield dialogue


class LongMemEvalFile(Sequence[Dialogue]):
    """The Dialogues of a LongMemEval file, decoded from disk on each access instead of held in memory.

    LongMemEval-M is several GB of JSON (500 questions of ~500 sessions); as Python objects more still, and each
    of N worker processes would hold a copy. This sequence holds byte spans (and pickles as such), so memory holds
    the Dialogue in use; walking it reads the file once. A file changed since it was checked is refused.
    """

    def __init__(self, path: Path, spans: tuple[tuple[int, int], ...], stamp: tuple[int, int]) -> None:
        self.path, self.spans, self.stamp = path, spans, stamp

    def __len__(self) -> int:
        return len(self.spans)

    @overload
    def __getitem__(self, index: int) -> Dialogue: ...
    @overload
    def __getitem__(self, index: slice) -> LongMemEvalFile: ...
    def __getitem__(self, index: int | slice) -> Dialogue | LongMemEvalFile:
        if isinstance(index, slice):
            return LongMemEvalFile(self.path, self.spans[index], self.stamp)
        start, end = self.spans[index]
        with open(self.path, "rb") as f:
            return self._read(f, start, end)

    def __iter__(self) -> Iterator[Dialogue]:
        with open(self.path, "rb") as f:
            for start, end in self.spans:
                yield self._read(f, start, end)

    def __repr__(self) -> str:
        return f"LongMemEvalFile({str(self.path)!r}, {len(self)} questions)"

    def _read(self, f: BinaryIO, start: int, end: int) -> Dialogue:
        if _stamp(self.path) != self.stamp:
            raise DatasetError(
                str(self.path), "the file changed after it was loaded; run again to load it anew"
            )
        f.seek(start)
        entry = json.loads(f.read(end - start))
        return _dialogue(entry, Where(str(self.path), entry["question_id"]))


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _records(path: Path) -> Iterator[tuple[Dialogue, int, int]]:
    """Each record of the file checked and decoded, with its byte span."""
    if not path.exists():
        raise FileNotFoundError(f"LongMemEval path does not exist: {path}")
    if path.is_dir():
        raise DatasetError(str(path), "expected a JSON file (e.g. longmemeval_s_cleaned.json), got a folder")
    source = str(path)
    seen: set[str] = set()
    for i, (entry, start, end) in enumerate(iter_json_array(path, source, "question records")):
        Where(source, f"#{i}").check(entry, dict, f"[{i}]")
        qid = Where(source, f"#{i}").get(entry, "question_id", str)
        if qid in seen:
            raise DatasetError(source, "duplicate question_id", sample=qid, field="question_id")
        seen.add(qid)
        yield _dialogue(entry, Where(source, qid)), start, end


def _dialogue(entry: dict[str, Any], where: Where) -> Dialogue:
    qid = where.sample
    assert qid is not None
    ids = where.get(entry, "haystack_session_ids", list)
    dates = where.get(entry, "haystack_dates", list)
    sessions_raw = where.get(entry, "haystack_sessions", list)
    if not len(ids) == len(dates) == len(sessions_raw):
        raise where.error(
            "haystack_sessions",
            f"lengths differ: {len(ids)} haystack_session_ids, {len(dates)} haystack_dates, "
            f"{len(sessions_raw)} haystack_sessions",
        )
    raw: list[tuple[datetime, int, str, list[Any]]] = []
    for k, (sid, date_text, turns) in enumerate(zip(ids, dates, sessions_raw, strict=True)):
        where.check(sid, str, f"haystack_session_ids[{k}]")
        raw.append((_date(date_text, where, f"haystack_dates[{k}]"), k, sid, turns))
    raw.sort(key=lambda r: (r[0], r[1]))
    if len({r[2] for r in raw}) != len(raw):
        log.warning("%s: %s: haystack_session_ids repeat; turn ids will repeat too", where.file, qid)

    sessions: list[Session] = []
    order = 0
    answer_turns: list[str] = []  # has_answer: the turns that hold the evidence (turn-level gold)
    for index, (date, k, sid, turn_dicts) in enumerate(raw):
        where.check(turn_dicts, list, f"haystack_sessions[{k}]")
        turns: list[Turn] = []
        for j, td in enumerate(turn_dicts):
            f = f"haystack_sessions[{k}][{j}]"
            where.check(td, dict, f)
            role = where.get(td, "role", str, field=f"{f}.role")
            if role not in _SPEAKERS:
                raise where.error(f"{f}.role", f"expected 'user' or 'assistant', got {role!r}")
            turns.append(
                Turn(
                    id=f"{sid}:{j}",
                    session_id=sid,
                    speaker=_SPEAKERS[role],
                    text=where.get(td, "content", str, field=f"{f}.content"),
                    timestamp=date,
                    order=order,
                    role=role,
                    source_id=f"{sid}:{j}",
                )
            )
            if td.get("has_answer") is True:
                answer_turns.append(f"{sid}:{j}")
            order += 1
        sessions.append(Session(sid, date, index, tuple(turns)))

    answer = where.get(entry, "answer", (str, int, float))
    evidence = where.get(entry, "answer_session_ids", list)
    for k, e in enumerate(evidence):
        where.check(e, str, f"answer_session_ids[{k}]")
    question = Question(
        id=qid,
        dialogue_id=qid,
        text=where.get(entry, "question", str),
        gold=str(int(answer)) if isinstance(answer, float) and answer.is_integer() else str(answer),
        evidence=tuple(evidence),
        question_type=where.get(entry, "question_type", str),
        date=_date(where.get(entry, "question_date", str), where, "question_date"),
        evidence_turns=tuple(answer_turns),
    )
    return Dialogue(qid, tuple(sessions), (question,), ("User", "Assistant"), where.file)


def _date(value: Any, where: Where, field: str) -> datetime:
    where.check(value, str, field)
    try:
        return parse_longmemeval_date(value)
    except ValueError as exc:
        raise where.error(field, str(exc)) from None
