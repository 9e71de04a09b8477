"""Roles: typed functions that render a template, call the LLM and return a value or a ``RoleFailure``.

Callers (the memory core, ATC, the generator) use these instead of building prompts, so every prompt is a
versioned template file and every call is cached and booked. A role never raises for a bad reply: it returns a
``RoleFailure`` the caller handles (ATC treats it as Skipped; the writer may fall back to the raw evidence).
The ATC roles return the validated JSON dict; the semantic checks (grounding, arity, applicability) belong to
the ATC executor, which knows the bank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allmem.llm.base import ChatResult
from allmem.llm.prompts import build_request


@dataclass(frozen=True)
class Descriptor:
    """The regenerable index of a unit: summary ``s`` and keywords ``K`` (paper, Sec. 3)."""

    summary: str
    keywords: tuple[str, ...]

    def text(self) -> str:
        """What the unit's embedding ``z`` is computed from: ``s`` concatenated with ``K``."""
        return f"{self.summary} {', '.join(self.keywords)}".strip()


@dataclass(frozen=True)
class RoleFailure:
    """Why a role produced no usable value. ``kind``: transport | no_json | invalid_json | schema | empty."""

    role: str
    kind: str
    message: str
    prompt_hash: str = ""
    raw: str = ""

    def __bool__(self) -> bool:  # so `if result:` reads as "succeeded"
        return False


def failure_of(role: str, res: ChatResult) -> RoleFailure | None:
    """The ``RoleFailure`` for an unusable result, or None when ``res`` parsed cleanly."""
    if res.error is not None:
        return RoleFailure(role, "transport", res.error, res.prompt_hash, res.text)
    if res.parse_error is not None:
        return RoleFailure(role, res.parse_error.kind, res.parse_error.message, res.prompt_hash, res.text)
    return None


def render_evidence(evidence: Sequence[Mapping[str, Any]]) -> str:
    """One line per record, ``[date] Speaker: text [image: caption]`` (the same line format as the context)."""
    lines = []
    for i, rec in enumerate(evidence):
        for key in ("speaker", "text"):
            if key not in rec:
                raise KeyError(f"evidence record {i}: missing field {key!r} (have {sorted(rec)})")
        line = f"[{rec.get('date') or 'unknown date'}] {rec['speaker']}: {rec['text']}".rstrip()
        if rec.get("caption"):
            line += f" [image: {rec['caption']}]"
        lines.append(line)
    return "\n".join(lines)


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


def run_role(
    llm: Any, template: str, variables: Mapping[str, Any], *, payload: Any = None
) -> dict[str, Any] | RoleFailure:
    """Render ``template`` with ``variables``, call, and return the schema-validated JSON object."""
    res = llm.chat(build_request(template, variables, payload=payload))
    fail = failure_of(template, res)
    return fail if fail is not None else res.data


# ---------------------------------------------------------------- ATC roles (diagnosis and planners)


def render_unit(unit: Mapping[str, Any]) -> str:
    """A unit as the ATC prompts show it. ``unit``: id, date, summary, keywords, evidence (records)."""
    if "id" not in unit:
        raise KeyError(f"unit: missing field 'id' (have {sorted(unit)})")
    keywords = ", ".join(unit.get("keywords") or ())
    head = f"id: {unit['id']} | date: {unit.get('date') or 'unknown date'}"
    return f"{head}\nsummary: {unit.get('summary', '')}\nkeywords: {keywords}\nevidence:\n{render_evidence(unit.get('evidence') or [])}"


def diagnose(
    llm: Any, target: Mapping[str, Any], neighbours: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | RoleFailure:
    """Edit proposals for one buffered unit: ``{"proposals": [{"op", "target", "p", "reason"}]}``."""
    variables = {
        "target_id": str(target["id"]),
        "target": render_unit(target),
        "neighbours": "\n\n".join(render_unit(u) for u in neighbours) or "(none)",
        "target_unit": dict(target),
        "neighbour_units": [dict(u) for u in neighbours],
    }
    return run_role(llm, "diagnose", variables)


def plan_split(llm: Any, unit: Mapping[str, Any]) -> dict[str, Any] | RoleFailure:
    """``{"segments": [verbatim spans], "reason"}`` for one conflated unit (grounding is the executor's check)."""
    variables = {
        "unit_id": str(unit["id"]),
        "summary": str(unit.get("summary", "")),
        "evidence": render_evidence(unit.get("evidence") or []),
        "unit": dict(unit),
    }
    return run_role(llm, "plan_split", variables)


def plan_merge(llm: Any, units: Sequence[Mapping[str, Any]]) -> dict[str, Any] | RoleFailure:
    """``{"summary", "keywords", "decline"?, "reason"?}``: the canonical descriptor of a redundant set."""
    variables = {
        "unit_ids": ", ".join(str(u["id"]) for u in units),
        "units": "\n\n".join(render_unit(u) for u in units),
        "source_units": [dict(u) for u in units],
    }
    return run_role(llm, "plan_merge", variables)


def plan_update(
    llm: Any, current: Mapping[str, Any], superseded: Mapping[str, Any]
) -> dict[str, Any] | RoleFailure:
    """``{"summary", "keywords", "decline"?, "reason"?}``: the refreshed descriptor of the current unit."""
    variables = {
        "current_id": str(current["id"]),
        "superseded_id": str(superseded["id"]),
        "current": render_unit(current),
        "superseded": render_unit(superseded),
        "current_unit": dict(current),
        "superseded_unit": dict(superseded),
    }
    return run_role(llm, "plan_update", variables)
