"""Memory-unit records: immutable evidence, the unit snapshot and typed links (re-exported by ``bank``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from allmem.types import Utterance

LINK_TYPES: tuple[str, ...] = ("temporal", "semantic", "version", "sibling")


class BankError(ValueError):
    """A bank operation or invariant check failed; the message names the unit and the field."""


@dataclass(frozen=True)
class EvidenceRecord:
    """One immutable piece of raw evidence: what was said, by whom, when, and which ids it credits."""

    speaker: str
    text: str
    caption: str | None = None
    date: str = ""
    source_ids: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "speaker": self.speaker,
            "text": self.text,
            "caption": self.caption,
            "date": self.date,
            "source_ids": list(self.source_ids),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | EvidenceRecord) -> EvidenceRecord:
        if isinstance(d, EvidenceRecord):
            return d
        if "text" not in d:
            raise BankError(f"evidence record has no field 'text': {dict(d)!r}")
        date = d.get("date") or ""
        if isinstance(date, datetime):
            date = date.isoformat()
        src = d.get("source_ids") or ()
        if isinstance(src, str):
            src = (src,)
        return cls(
            str(d.get("speaker") or ""), str(d["text"]), d.get("caption") or None, str(date), tuple(src)
        )


def evidence_hash(records: Sequence[EvidenceRecord]) -> str:
    """Content hash of evidence: stored at creation, re-checked to prove evidence is never edited."""
    blob = json.dumps(
        [r.as_dict() for r in records], sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Unit:
    """A snapshot of one memory unit. The bank replaces it on every change, so holders never see a mutation."""

    id: str
    row: int
    evidence: tuple[EvidenceRecord, ...]
    evidence_hash: str
    summary: str
    keywords: tuple[str, ...]
    timestamp: datetime
    order: int = 0
    visible: bool = True

    @property
    def source_ids(self) -> tuple[str, ...]:
        """Ids credited by retrieval metrics: the ordered union over the evidence records."""
        seen: dict[str, None] = {}
        for r in self.evidence:
            for s in r.source_ids:
                seen.setdefault(s, None)
        return tuple(seen)

    def evidence_dicts(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self.evidence]

    def utterances(self) -> tuple[Utterance, ...]:
        """The evidence records as the parts of a retrieved unit (what the generator reads)."""
        return tuple(Utterance(r.speaker or None, r.text, r.caption or None) for r in self.evidence)

    def evidence_text(self) -> str:
        """``Speaker: text [image: caption]`` per record, one per line."""
        return "\n".join(u.render() for u in self.utterances())

    def descriptor_text(self) -> str:
        """The string that is embedded: summary concatenated with the keywords (paper, Sec. 3)."""
        return descriptor_text(self.summary, self.keywords)


EMBED_FORMATS = ("paper", "ref")


def descriptor_text(summary: str, keywords: Sequence[str], layout: str = "paper") -> str:
    """The one writer of a descriptor as text: what ``z`` is computed from and what lexical scorers index.

    ``paper``: ``s`` concatenated with ``K`` ("summary k1, k2"; paper, Sec. 3). ``ref``: the authors' code's
    layout ("Keywords: k1, k2\n\nSummary: summary"), selected by ``method.write.embed_format``.
    """
    if layout == "ref":
        kw = ", ".join(keywords)
        return f"Keywords: {kw}\n\nSummary: {summary}" if kw else summary
    if layout != "paper":
        raise ValueError(f"descriptor layout must be one of {EMBED_FORMATS}, got {layout!r}")
    kw = ", ".join(k for k in keywords if k)
    return f"{summary} {kw}".strip() if kw else summary.strip()


@dataclass(frozen=True)
class Link:
    type: str
    src: str
    dst: str
    weight: float = 1.0
    seq: int = 0  # creation order over the whole bank: a type-agnostic, deterministic order
