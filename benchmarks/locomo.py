"""LoCoMo (Maharana et al., ACL 2024) → ``Dialogue``s.

Reads every layout the benchmark ships in: ``locomo10.json`` (a list of samples with a nested
``conversation``), the official ``locomo10.zip`` (one flat JSON per conversation, ``26.json``, with the same keys at
top level), or a folder of such files. Facts the loader encodes (docs PROTOCOL.md, "Datasets"):

- sessions are streamed in time order: sorted by the parsed ``session_N_date_time``, ties by N; a date key
  without its ``session_N`` list is skipped (conv-26 has 16 of them);
- every turn carries its session's date; ``Turn.order`` is the 0-based position in that stream;
- category-5 gold is ``adversarial_answer`` (falling back to ``answer``); integer answers become strings;
- evidence strings are kept raw by default (the ``allmem`` protocol scores them as is, so the 9 malformed ones
  never match); ``repair_evidence=True`` splits, un-pads and fixes them where the fix is unambiguous.
"""

from __future__ import annotations

import logging
import re
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from os import PathLike
from pathlib import Path
from typing import Any

from allmem.types import Dialogue, Question, Session, Turn
from benchmarks.errors import DatasetError, Where, parse_json

log = logging.getLogger(__name__)

_MONTHS = {
    name: i + 1
    for i, name in enumerate(
        "january february march april may june july august september october november december".split()
    )
}
_DATE_RE = re.compile(
    r"\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})\s*", re.IGNORECASE
)
_SESSION_RE = re.compile(r"session_(\d+)")
_SESSION_DATE_RE = re.compile(r"session_(\d+)_date_time")
_EVIDENCE_ID_RE = re.compile(r"D:?(\d+):(\d+)")


def parse_locomo_date(text: str) -> datetime:
    """``1:56 pm on 8 May, 2023`` → ``datetime(2023, 5, 8, 13, 56)``; ValueError if it is not that shape.

    Parsed by hand rather than ``strptime`` so the result does not depend on the process locale.
    """
    m = _DATE_RE.fullmatch(text)
    if not m:
        raise ValueError(f"cannot parse date {text!r}")
    hour, minute, half, day, month_name, year = m.groups()
    month = _MONTHS.get(month_name.lower()) or next(
        (n for name, n in _MONTHS.items() if len(month_name) >= 3 and name.startswith(month_name.lower())),
        None,
    )
    h = int(hour)
    if month is None or not 1 <= h <= 12:
        raise ValueError(f"cannot parse date {text!r}")
    h = h % 12 + (12 if half.lower() == "p" else 0)
    try:
        return datetime(int(year), month, int(day), h, int(minute))
    except ValueError:
        raise ValueError(f"cannot parse date {text!r}") from None


def load_locomo(path: str | PathLike[str], *, repair_evidence: bool = False) -> list[Dialogue]:
    """All dialogues in ``path`` (``locomo10.json``, the official zip, or a folder of per-conversation JSONs)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"LoCoMo path does not exist: {path}")
    dialogues: list[Dialogue] = []
    for label, disk, stem, doc in _documents(path):
        # ``source`` names the file on disk (the archive for a zip member) so run manifests can hash it.
        dialogues.extend(replace(d, source=disk) for d in _dialogues_in(doc, label, stem, repair_evidence))
    seen: set[str] = set()
    for d in dialogues:
        if d.id in seen:
            raise DatasetError(d.source, f"dialogue id {d.id!r} appears twice in {path}", sample=d.id)
        seen.add(d.id)
    return dialogues


def _file_key(name: str) -> tuple[int, str]:
    """Order ``26.json`` < ``30.json`` < ``100.json`` numerically, like the samples in ``locomo10.json``."""
    stem = Path(name).stem
    return (int(stem), name) if stem.isdigit() else (1 << 30, name)


def _documents(path: Path) -> Iterator[tuple[str, str, str, Any]]:
    """(label for errors, file on disk, file stem, parsed JSON) for every JSON document under ``path``."""
    if path.is_dir():
        files = sorted((p for p in path.rglob("*.json") if p.is_file()), key=lambda p: _file_key(str(p)))
        if not files:
            raise DatasetError(str(path), "folder holds no .json files")
        for f in files:
            yield str(f), str(f), f.stem, parse_json(f.read_bytes(), str(f))
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            members = [
                m
                for m in zf.namelist()
                if m.endswith(".json") and not m.endswith("/") and "__MACOSX" not in m
            ]
            if not members:
                raise DatasetError(str(path), "zip archive holds no .json files")
            for m in sorted(members, key=_file_key):
                label = f"{path}:{m}"
                yield label, str(path), Path(m).stem, parse_json(zf.read(m), label)
    else:
        yield str(path), str(path), path.stem, parse_json(path.read_bytes(), str(path))


def _dialogues_in(doc: Any, source: str, stem: str, repair: bool) -> Iterator[Dialogue]:
    """A document is a list of samples, one nested sample, or one flat (zip-layout) conversation."""
    if isinstance(doc, list):
        for i, sample in enumerate(doc):
            where = Where(source, f"#{i}")
            where.check(sample, dict, f"[{i}]")
            sample_id = where.get(sample, "sample_id", str)
            yield _nested(sample, Where(source, sample_id), repair)
    elif isinstance(doc, dict) and ("conversation" in doc or "speaker_a" in doc):
        sample_id = Where(source).check(doc.get("sample_id") or _default_id(stem), str, "sample_id")
        where = Where(source, sample_id)
        if "conversation" in doc:
            yield _nested(doc, where, repair)
        else:  # the official zip's layout: conversation keys at top level
            yield _build(sample_id, doc, where.get(doc, "qa", list), where, where, repair)
    else:
        raise DatasetError(
            source,
            "expected a list of LoCoMo samples, a sample with 'conversation', "
            f"or a flat conversation with 'speaker_a'; got {type(doc).__name__}",
        )


def _default_id(stem: str) -> str:
    """The official zip names files ``26.json`` for sample ``conv-26``."""
    return f"conv-{stem}" if stem.isdigit() else stem


def _nested(sample: Mapping[str, Any], where: Where, repair: bool) -> Dialogue:
    conv = where.get(sample, "conversation", dict)
    qa = where.get(sample, "qa", list)
    assert where.sample is not None
    return _build(where.sample, conv, qa, Where(where.file, where.sample, "conversation."), where, repair)


def _build(
    dialogue_id: str,
    conv: Mapping[str, Any],
    qa: Sequence[Any],
    cw: Where,
    qw: Where,
    repair: bool,
) -> Dialogue:
    """``cw`` locates conversation fields, ``qw`` the sample's top-level fields (``qa``)."""
    speakers = (cw.get(conv, "speaker_a", str), cw.get(conv, "speaker_b", str))
    sessions = _sessions(conv, cw)
    known = {t.id for s in sessions for t in s.turns}
    questions = tuple(_question(dialogue_id, i, q, qw, known if repair else None) for i, q in enumerate(qa))
    return Dialogue(dialogue_id, sessions, questions, speakers, cw.file)


def _sessions(conv: Mapping[str, Any], where: Where) -> tuple[Session, ...]:
    raw: list[tuple[datetime, int, list[Any]]] = []
    for key, value in conv.items():
        m = _SESSION_RE.fullmatch(key)
        if not m:
            continue
        n = int(m.group(1))
        turns = where.check(value, list, where.field(key))
        date_key = f"session_{n}_date_time"
        date_text = where.get(conv, date_key, str)
        try:
            date = parse_locomo_date(date_text)
        except ValueError as exc:
            raise where.error(where.field(date_key), str(exc)) from None
        raw.append((date, n, turns))
    if not raw:
        raise where.error(None, "no session_N lists found")
    skipped = sorted(
        int(m.group(1))
        for k in conv
        if (m := _SESSION_DATE_RE.fullmatch(k)) and f"session_{m.group(1)}" not in conv
    )
    if skipped:
        log.debug("%s: %s: skipped dates without sessions: %s", where.file, where.sample, skipped)
    numeric = [n for _, n, _ in sorted(raw, key=lambda r: r[1])]
    raw.sort(key=lambda r: (r[0], r[1]))
    chrono = [n for _, n, _ in raw]
    if chrono != numeric:
        log.info("%s: %s: sessions reordered by date: %s", where.file, where.sample, chrono)

    sessions: list[Session] = []
    seen: dict[str, str] = {}
    order = 0
    for index, (date, n, turn_dicts) in enumerate(raw):
        session_id = f"D{n}"
        turns: list[Turn] = []
        for j, td in enumerate(turn_dicts):
            f = where.field(f"session_{n}[{j}]")
            where.check(td, dict, f)
            dia_id = where.get(td, "dia_id", str, field=f"{f}.dia_id")
            if dia_id in seen:
                raise where.error(f"{f}.dia_id", f"duplicate dia_id {dia_id!r} (also at {seen[dia_id]})")
            seen[dia_id] = f
            turns.append(
                Turn(
                    id=dia_id,
                    session_id=session_id,
                    speaker=where.get(td, "speaker", str, field=f"{f}.speaker"),
                    text=where.get(td, "text", str, field=f"{f}.text"),
                    timestamp=date,
                    order=order,
                    caption=where.get(td, "blip_caption", str, field=f"{f}.blip_caption", required=False),
                    source_id=dia_id,
                )
            )
            order += 1
        sessions.append(Session(session_id, date, index, tuple(turns)))
    return tuple(sessions)


def _as_text(value: Any, where: Where, field: str) -> str:
    """Answers are strings, except a few bare integers (years, counts): cast so metrics see text."""
    where.check(value, (str, int, float), field)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _question(dialogue_id: str, i: int, q: Any, where: Where, known: set[str] | None) -> Question:
    f = f"qa[{i}]"
    where.check(q, dict, f)
    category = where.get(q, "category", int, field=f"{f}.category")
    if not 1 <= category <= 5:
        raise where.error(f"{f}.category", f"expected 1..5, got {category}")
    if category == 5 and "adversarial_answer" in q:
        gold = _as_text(q["adversarial_answer"], where, f"{f}.adversarial_answer")
    elif "answer" in q:
        gold = _as_text(q["answer"], where, f"{f}.answer")
    else:
        missing = "adversarial_answer" if category == 5 else "answer"
        raise where.error(f"{f}.{missing}", "missing")
    evidence = where.get(q, "evidence", list, field=f"{f}.evidence")
    for k, e in enumerate(evidence):
        where.check(e, str, f"{f}.evidence[{k}]")
    qid = f"{dialogue_id}:q{i:04d}"
    ev = tuple(evidence) if known is None else repair_evidence_ids(evidence, known, qid)
    return Question(
        id=qid,
        dialogue_id=dialogue_id,
        text=where.get(q, "question", str, field=f"{f}.question"),
        gold=gold,
        evidence=ev,
        category=category,
    )


def repair_evidence_ids(evidence: Sequence[str], known: set[str], label: str = "") -> tuple[str, ...]:
    """Fix the malformed LoCoMo evidence strings that have one obvious reading.

    Splits ``"D8:6; D9:17"`` and ``"D9:1 D4:4"`` into ids, strips zero padding (``D30:05`` → ``D30:5``) and drops a
    stray colon (``D:11:26`` → ``D11:26``), each only when the result names a turn of the dialogue. Anything else
    (``D``, ids of turns that do not exist) is kept as is and logged: guessing would change the gold.
    """
    out: list[str] = []
    for raw in evidence:
        parts = [p for p in re.split(r"[;\s]+", raw) if p]
        if parts != [raw]:
            log.info("%s: evidence %r split into %s", label, raw, parts)
        for part in parts:
            if part in known:
                out.append(part)
                continue
            m = _EVIDENCE_ID_RE.fullmatch(part)
            fixed = f"D{int(m.group(1))}:{int(m.group(2))}" if m else None
            if fixed is not None and fixed in known:
                log.info("%s: evidence %r repaired to %r", label, part, fixed)
                out.append(fixed)
            else:
                log.warning("%s: evidence %r matches no turn and has no unambiguous fix; kept", label, part)
                out.append(part)
    return tuple(dict.fromkeys(out))
