"""The offline backend: deterministic implementations of every prompt's role, dispatched on the template name.

It never parses a prompt. Each role is a function ``fn(request) -> str`` that reads the request's structured
``variables`` (and, where needed, its live ``payload``) and returns the JSON text an LLM would have replied, so
the reply goes through the same wrapper (cache, ledger, parsing, phase tags) as a real model's.

Registering a role (the ATC code does this for ``diagnose``, ``plan_split``, ``plan_merge``, ``plan_update``)::

    from allmem.llm.offline import register_offline_role

    @register_offline_role("diagnose")
    def diagnose_offline(req: ChatRequest) -> str:
        return json.dumps({"proposals": [...]})

Registration happens when the module defining the role is imported. So that callers need not remember to
import it, ``ROLE_PROVIDERS`` names the module that provides each template; the backend imports it on first
use. Judge templates have no offline role on purpose: an offline proxy must never be reported as 4o-J.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from allmem.llm.base import BackendReply, ChatRequest, LLMError
from allmem.llm.keywords import KeywordExtractor

OfflineRole = Callable[[ChatRequest], str]

#: template name -> offline implementation. Fill it with ``register_offline_role``.
OFFLINE_ROLES: dict[str, OfflineRole] = {}

#: template name -> module whose import registers its offline role (imported lazily, on first use).
ROLE_PROVIDERS: dict[str, str] = {
    "diagnose": "allmem.memory.atc.offline_roles",
    "plan_split": "allmem.memory.atc.offline_roles",
    "plan_merge": "allmem.memory.atc.offline_roles",
    "plan_update": "allmem.memory.atc.offline_roles",
    "answer_locomo": "allmem.generate_llm",
    "answer_locomo_options": "allmem.generate_llm",
    "answer_longmemeval": "allmem.generate_llm",
}


def register_offline_role(template: str, fn: OfflineRole | None = None) -> Any:
    """Register ``fn`` as the offline role for ``template``; usable as a decorator."""

    def deco(f: OfflineRole) -> OfflineRole:
        OFFLINE_ROLES[template] = f
        return f

    return deco(fn) if fn is not None else deco


def offline_role(template: str) -> OfflineRole:
    """The registered role, importing its provider module if needed; a clear error when there is none."""
    if template not in OFFLINE_ROLES and template in ROLE_PROVIDERS:
        try:
            importlib.import_module(ROLE_PROVIDERS[template])
        except ModuleNotFoundError as exc:
            raise LLMError(
                f"offline backend: template {template!r} has no offline role yet "
                f"(its provider {ROLE_PROVIDERS[template]} failed to import: {exc})"
            ) from exc
    try:
        return OFFLINE_ROLES[template]
    except KeyError:
        raise LLMError(
            f"offline backend: no offline role registered for template {template!r}; "
            "judge templates have none by design (use llm=openai or llm=replay to judge)"
        ) from None


class OfflineBackend:
    """Computes every role locally; token counts are measured on the rendered prompt by the wrapper."""

    name = "offline"
    can_judge = False
    makes_network_calls = False

    def __init__(self, model: str = "offline") -> None:
        self.model = model

    def cache_identity(self) -> str:
        return self.name

    def complete(self, req: ChatRequest, model: str, params: Mapping[str, Any]) -> BackendReply:
        return BackendReply(text=offline_role(req.template)(req))

    def close(self) -> None:
        """Nothing to release."""


# ---------------------------------------------------------------- descriptor role

_KEYWORDS = KeywordExtractor()


def _clean(text: str | None) -> str:
    return re.sub(r"\s+", " ", text or "").strip()


def _trim(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars].rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + " …"


def offline_descriptor(
    records: Sequence[Mapping[str, Any]], n_keywords: int, max_chars: int
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
        line = f"{speaker}: {text}" if speaker else text
        if caption:
            line += f" [image: {caption}]"
        lines.append(line.strip())
        bodies.append(". ".join(p for p in (text, caption) if p))
        if speaker and speaker not in speakers:
            speakers.append(speaker)
    summary = _trim(" ".join(x for x in lines if x), max_chars)
    extractor = (
        _KEYWORDS if n_keywords == _KEYWORDS.max_keywords else KeywordExtractor(max_keywords=n_keywords)
    )
    keywords = extractor("\n".join(bodies), speakers=speakers)
    return {"summary": summary, "keywords": list(keywords)}


@register_offline_role("descriptor")
def _descriptor_role(req: ChatRequest) -> str:
    v = req.variables
    out = offline_descriptor(
        v.get("evidence_records", []),
        n_keywords=int(v.get("n_keywords", 12)),
        max_chars=int(v.get("max_summary_chars", 1200)),
    )
    return json.dumps(out, ensure_ascii=False)
