"""Roles: typed functions that render a template, call the LLM and return a value or a ``RoleFailure``.

Callers (the memory core, ATC, the reader, the baselines) define their roles next to their own code and use these
helpers, so every prompt is a versioned template file and every call is cached and booked. A role never raises
for a bad reply: it returns a ``RoleFailure`` the caller handles (ATC treats it as Skipped; the writer falls back
to the raw evidence). The LLM layer itself knows no caller: offline answers come from the request's payload
(``allmem.llm.offline``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from allmem.llm.base import ChatResult
from allmem.llm.prompts import build_request


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


def run_role(
    llm: Any, template: str, variables: Mapping[str, Any], *, payload: Any = None
) -> dict[str, Any] | RoleFailure:
    """Render ``template`` with ``variables``, call, and return the schema-validated JSON object."""
    res = llm.chat(build_request(template, variables, payload=payload))
    fail = failure_of(template, res)
    return fail if fail is not None else res.data
