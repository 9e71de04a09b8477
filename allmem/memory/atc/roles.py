"""The ATC prompts as roles: diagnosis (edit proposals) and the Split / Merge / Update planners.

Each returns the schema-validated JSON dict or a ``RoleFailure``; the semantic checks (grounding, arity,
applicability) belong to the executor, which knows the bank. Offline, the consolidator's ``Meter`` attaches an
``OfflinePayload`` (``allmem.memory.atc.offline_roles``) that answers these prompts deterministically.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from allmem.llm.roles import RoleFailure, run_role
from allmem.memory.descriptor import render_evidence


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
