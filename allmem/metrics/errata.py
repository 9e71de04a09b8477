"""Answer-key errata, applied when scoring: the dataset file is never changed, the run's records neither.

A dataset's errata live in ``allmem/metrics/errata/<dataset>.yaml`` (LoCoMo only, today): a ``version`` and a list
of entries, each naming one question by its conversation and its exact question text, the problem in our words,
the public report that raised it, and the fix: ``correct`` (score against ``answer``, and ``evidence`` when
given) or ``exclude`` (leave the question out). An entry matches at most one record of a run (a run of a subset
may hold none) and exactly one question of the real dataset (``tests/test_errata.py``); two matches are an error.

``errata_block`` is what ``metrics.json`` stores under ``errata``: the file's version and sha256, which questions
it changed, and the summary (``allmem.metrics.aggregate.summarise``) of the records with the errata applied, so
every table can show a score both ways with the number of questions affected. A judge verdict was given against
the old answer, so a corrected question has no verdict in the errata view (missing, never guessed).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

FOLDER = Path(__file__).resolve().parent / "errata"
ACTIONS = ("correct", "exclude")
_ENTRY_KEYS = {"conversation", "question", "problem", "action", "answer", "evidence", "source"}


class ErrataError(ValueError):
    """An errata file that is malformed or does not fit the records it is applied to (file and entry named)."""


@dataclass(frozen=True)
class Entry:
    conversation: str
    question: str
    problem: str
    action: str  # correct | exclude
    answer: str | None
    evidence: tuple[str, ...] | None
    source: str

    @property
    def key(self) -> tuple[str, str]:
        return self.conversation, self.question.strip()


@dataclass(frozen=True)
class Errata:
    dataset: str
    version: int
    sha256: str
    path: Path
    entries: tuple[Entry, ...]


def path_for(dataset: str) -> Path:
    return FOLDER / f"{dataset}.yaml"


def load(dataset: str, path: Path | None = None) -> Errata | None:
    """The errata of ``dataset`` (None when it has no file); every entry checked, errors name file and entry."""
    path = path or path_for(dataset)
    if not path.is_file():
        return None
    data = path.read_bytes()
    raw = yaml.safe_load(data)
    if not isinstance(raw, Mapping) or not isinstance(raw.get("entries"), list):
        raise ErrataError(f"{path}: expected a mapping with 'version' and a list 'entries'")
    version = raw.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ErrataError(f"{path}: 'version' must be a positive integer, got {version!r}")
    entries: list[Entry] = []
    seen: dict[tuple[str, str], int] = {}
    for i, item in enumerate(raw["entries"]):
        entry = _entry(item, f"{path}: entry {i}")
        if entry.key in seen:
            raise ErrataError(f"{path}: entry {i} names the same question as entry {seen[entry.key]}")
        seen[entry.key] = i
        entries.append(entry)
    return Errata(
        str(raw.get("dataset", dataset)), version, hashlib.sha256(data).hexdigest(), path, tuple(entries)
    )


def _entry(item: Any, where: str) -> Entry:
    if not isinstance(item, Mapping):
        raise ErrataError(f"{where}: not a mapping")
    unknown = set(item) - _ENTRY_KEYS
    if unknown:
        raise ErrataError(f"{where}: unknown keys {sorted(unknown)}")
    for key in ("conversation", "question", "problem", "action", "source"):
        if not isinstance(item.get(key), str) or not item[key].strip():
            raise ErrataError(f"{where}: '{key}' must be a non-empty string")
    action = item["action"]
    if action not in ACTIONS:
        raise ErrataError(f"{where}: 'action' must be one of {list(ACTIONS)}, got {action!r}")
    answer, evidence = item.get("answer"), item.get("evidence")
    if action == "correct":
        if not isinstance(answer, str) or not answer.strip():
            raise ErrataError(f"{where}: a 'correct' entry needs a non-empty 'answer'")
        if evidence is not None and (
            not isinstance(evidence, list) or not all(isinstance(e, str) and e for e in evidence)
        ):
            raise ErrataError(f"{where}: 'evidence' must be a list of turn ids")
    elif answer is not None or evidence is not None:
        raise ErrataError(f"{where}: an 'exclude' entry takes no 'answer' or 'evidence'")
    return Entry(
        conversation=item["conversation"], question=item["question"], problem=item["problem"], action=action,
        answer=answer, evidence=None if evidence is None else tuple(evidence), source=item["source"],
    )  # fmt: skip


def match(errata: Errata, records: Sequence[Mapping[str, Any]]) -> dict[int, Entry]:
    """Record index → its entry. An entry matching two records is an error; one matching none is allowed (a run
    of a subset), and ``unmatched`` in the block counts them."""
    by_key = {e.key: e for e in errata.entries}
    found: dict[int, Entry] = {}
    first: dict[tuple[str, str], int] = {}
    for i, rec in enumerate(records):
        key = (str(rec.get("dialogue_id") or ""), str(rec.get("question") or "").strip())
        entry = by_key.get(key)
        if entry is None:
            continue
        if key in first:
            raise ErrataError(
                f"{errata.path}: the entry for {key[0]} {key[1]!r} matches two records "
                f"({records[first[key]].get('question_id')!r} and {rec.get('question_id')!r})"
            )
        first[key] = i
        found[i] = entry
    return found


def apply(
    errata: Errata, records: Sequence[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """The records with the errata applied (excluded ones dropped, corrected ones re-keyed and unjudged), and the
    question ids corrected and excluded."""
    hits = match(errata, records)
    out: list[dict[str, Any]] = []
    changed: dict[str, list[str]] = {"corrected": [], "excluded": []}
    for i, rec in enumerate(records):
        entry = hits.get(i)
        if entry is None:
            out.append(dict(rec))
            continue
        qid = str(rec.get("question_id"))
        if entry.action == "exclude":
            changed["excluded"].append(qid)
            continue
        fixed = dict(rec, gold=entry.answer, verdict=None)
        if entry.evidence is not None:
            fixed["evidence"] = list(entry.evidence)
        changed["corrected"].append(qid)
        out.append(fixed)
    return out, changed


def errata_block(
    records: Sequence[Mapping[str, Any]], protocol: Any, dataset: str | None
) -> dict[str, Any] | None:
    """``metrics.json``'s ``errata``: None when the dataset has no errata file, else the file's identity, the
    questions affected and the summary with the errata applied (validated records in, as ``summarise`` takes)."""
    from allmem.metrics.aggregate import summarise
    from allmem.metrics.protocols import as_protocol

    errata = load(dataset) if dataset else None
    if errata is None:
        return None
    fixed, changed = apply(errata, records)
    summary = summarise(fixed, as_protocol(protocol))
    affected = len(changed["corrected"]) + len(changed["excluded"])
    return {
        "file": f"allmem/metrics/errata/{errata.path.name}",
        "version": errata.version,
        "sha256": errata.sha256,
        "entries": len(errata.entries),
        "affected": affected,
        "unmatched": len(errata.entries) - affected,
        "corrected": changed["corrected"],
        "excluded": changed["excluded"],
        "n_scored": summary["n_scored"],
        "n_excluded": summary["n_excluded"],
        "overall": summary["overall"],
        "groups": summary["groups"],
    }
