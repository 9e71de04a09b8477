"""All-Mem's descriptor method: the regenerable index ``(s, K)`` of a unit (paper, Sec. 3; docs/METHOD.md).

``describe`` asks the descriptor-compression prompt for a summary ``s`` and keywords ``K`` of a unit's evidence
(phase ``write``; ATC also describes split siblings with it). Offline, ``DescriptorResponder`` answers the same
prompt deterministically: the summary is the cleaned evidence and the keywords are the speakers, YAKE
keyphrases, names, dates and numbers (``allmem.text.keywords``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allmem.cache_store import library_identity
from allmem.llm.base import ChatRequest
from allmem.llm.prompts import build_request
from allmem.llm.roles import RoleFailure, failure_of
from allmem.memory.units import descriptor_text
from allmem.text.keywords import KeywordExtractor
from allmem.types import utterance_line

MAX_SUMMARY_CHARS = 1200  # offline summaries are cut at a word boundary past this length


@dataclass(frozen=True)
class Descriptor:
    """The regenerable index of a unit: summary ``s`` and keywords ``K`` (paper, Sec. 3)."""

    summary: str
    keywords: tuple[str, ...]

    def text(self) -> str:
        """What the unit's embedding ``z`` is computed from: ``s`` concatenated with ``K``."""
        return descriptor_text(self.summary, self.keywords)


def render_evidence(evidence: Sequence[Mapping[str, Any]]) -> str:
    """One line per record, ``[date] Speaker: text [image: caption]`` (the same line format as the context)."""
    lines = []
    for i, rec in enumerate(evidence):
        for key in ("speaker", "text"):
            if key not in rec:
                raise KeyError(f"evidence record {i}: missing field {key!r} (have {sorted(rec)})")
        line = utterance_line(rec["speaker"], str(rec["text"]).rstrip(), rec.get("caption"))
        lines.append(f"[{rec.get('date') or 'unknown date'}] {line}")
    return "\n".join(lines)


# ---------------------------------------------------------------- offline stand-in

_WS = re.compile(r"\s+")
_KEYWORDS = KeywordExtractor()


def _clean(text: str | None) -> str:
    return _WS.sub(" ", text or "").strip()


def _trim(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars].rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + " …"


def offline_descriptor(
    records: Sequence[Mapping[str, Any]], n_keywords: int, max_chars: int = MAX_SUMMARY_CHARS
) -> dict[str, Any]:
    """Summary = the cleaned evidence (speaker, text, caption); keywords = speakers, YAKE, names, dates, numbers.

    Dates of the records are not put into the summary: every turn of a session shares one date, so it would
    pull all of a session's descriptors together in embedding space without telling them apart.
    """
    lines: list[str] = []
    bodies: list[str] = []
    speakers: list[str] = []
    for rec in records:
        speaker, text, caption = (
            _clean(rec.get("speaker")),
            _clean(rec.get("text")),
            _clean(rec.get("caption")),
        )
        lines.append(utterance_line(speaker, text, caption).strip())
        bodies.append(". ".join(p for p in (text, caption) if p))
        if speaker and speaker not in speakers:
            speakers.append(speaker)
    summary = _trim(" ".join(x for x in lines if x), max_chars)
    extractor = (
        _KEYWORDS if n_keywords == _KEYWORDS.max_keywords else KeywordExtractor(max_keywords=n_keywords)
    )
    keywords = extractor("\n".join(bodies), speakers=speakers)
    return {"summary": summary, "keywords": list(keywords)}


@dataclass(frozen=True)
class DescriptorResponder:
    """The offline answer to the descriptor prompt (attached as the request's payload)."""

    n_keywords: int = 12
    max_chars: int = MAX_SUMMARY_CHARS

    def offline_reply(self, req: ChatRequest) -> str:
        records = req.variables.get("evidence_records", [])
        out = offline_descriptor(records, n_keywords=self.n_keywords, max_chars=self.max_chars)
        return json.dumps(out, ensure_ascii=False)

    def offline_inputs(self, req: ChatRequest) -> dict[str, Any]:
        """What ``offline_reply`` reads (``allmem.llm.offline.reply_key``): each record's speaker, text and caption
        (not its date: a session repeated under another date gets the same reply), the two caps, and the versions
        of YAKE, of what it requires and of Python (``library_identity``)."""
        fields = ("speaker", "text", "caption")
        records = [[rec.get(k) for k in fields] for rec in req.variables.get("evidence_records", [])]
        return {
            "records": records,
            "n_keywords": self.n_keywords,
            "max_chars": self.max_chars,
            "libraries": library_identity("yake"),
        }


def describe(
    llm: Any, evidence: Sequence[Mapping[str, Any]], n_keywords: int = 12
) -> Descriptor | RoleFailure:
    """Descriptor compression for one unit's evidence (phase ``write``; also used for split siblings).

    ``evidence`` records: ``{"speaker", "text", "caption" (or None), "date", "source_ids"}``.
    """
    if not evidence:
        return RoleFailure("descriptor", "empty", "no evidence records given")
    records = [dict(r) for r in evidence]
    req = build_request(
        "descriptor",
        {"evidence": render_evidence(records), "n_keywords": str(n_keywords), "evidence_records": records},
        payload=DescriptorResponder(n_keywords=n_keywords),
    )
    res = llm.chat(req)
    fail = failure_of("descriptor", res)
    if fail is not None:
        return fail
    summary = " ".join(str(res.data["summary"]).split())
    keywords: list[str] = []
    for k in res.data["keywords"]:
        k = " ".join(str(k).split())
        if k and k.lower() not in {x.lower() for x in keywords}:
            keywords.append(k)
    if not summary:
        return RoleFailure("descriptor", "empty", "empty summary", res.prompt_hash, res.text)
    return Descriptor(summary=summary, keywords=tuple(keywords[:n_keywords]))
