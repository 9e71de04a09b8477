"""Offline implementations of the ATC prompts (diagnose, plan_split, plan_merge, plan_update).

The consolidator attaches an ``OfflinePayload`` to every ATC request (through ``allmem.memory.atc.meter.Meter``);
the offline backend asks it for the reply (``OfflinePayload.offline_reply``). Each role reads the request's
structured variables (the same units the prompt shows) and the payload's live objects (embeddings, the sentence
embedder, the calibration), and replies with the JSON a model would give, so the reply goes through the same
cache, ledger and parsing as a real model's.

Planners: Split segments are verbatim sentence groups of the unit's single evidence record (fewer than two
groups: a Noop plan); the Merge descriptor is the most central member's summary (highest mean cosine to the
others) with the union of the members' keywords; the Update descriptor is the current unit's, re-extracted by
the offline descriptor from its own evidence.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from allmem.errors import LLMError
from allmem.llm.base import ChatRequest
from allmem.memory.atc import drift
from allmem.memory.descriptor import offline_descriptor


@dataclass(frozen=True)
class OfflinePayload:
    """What the offline diagnoser knows beyond the prompt text: the units' embeddings and order, a sentence
    embedder (thread-safe) for Split, the calibration and the operators switched on."""

    views: Mapping[str, drift.UnitView]
    embed: drift.Embed | None
    cal: drift.Calibration
    ops: tuple[str, ...] = ("split", "merge", "update")
    n_keywords: int = 12

    def offline_reply(self, req: ChatRequest) -> str:
        role = OFFLINE_ROLES.get(req.template)
        if role is None:
            raise LLMError(f"offline ATC payload: no offline role for template {req.template!r}")
        return role(req)


def _payload(req: ChatRequest) -> OfflinePayload:
    p = req.payload
    if not isinstance(p, OfflinePayload):
        raise LLMError(
            f"offline {req.template}: the request carries no OfflinePayload (got {type(p).__name__}); "
            "ATC attaches one through allmem.memory.atc.meter.Meter; call ATC roles through the consolidator"
        )
    return p


def _view(p: OfflinePayload, unit: Mapping[str, Any], template: str) -> drift.UnitView:
    uid = str(unit.get("id", ""))
    if uid not in p.views:
        raise LLMError(f"offline {template}: unit {uid!r} is not in the payload's views")
    return p.views[uid]


def diagnose_role(req: ChatRequest) -> str:
    p = _payload(req)
    v = req.variables
    focal = _view(p, v["target_unit"], "diagnose")
    context = [_view(p, u, "diagnose") for u in v.get("neighbour_units", [])]
    props = drift.diagnose(focal, context, p.embed, p.cal, p.ops)
    out = [{"op": x.op, "target": list(x.target), "p": x.p, "reason": x.reason} for x in props]
    return json.dumps({"proposals": out}, ensure_ascii=False)


def plan_split_role(req: ChatRequest) -> str:
    p = _payload(req)
    unit = req.variables["unit"]
    records = unit.get("evidence") or []
    if len(records) != 1 or p.embed is None:
        return json.dumps({"segments": [], "reason": "only single-record units are split offline"})
    segs, sep = drift.segment(str(records[0].get("text", "")), p.embed, p.cal)
    if len(segs) < 2:
        return json.dumps({"segments": [], "reason": "one topic"})
    return json.dumps(
        {"segments": segs, "reason": f"max between-segment cosine {sep:.2f}"}, ensure_ascii=False
    )


def central_index(vectors: Sequence[np.ndarray]) -> int:
    """The member with the highest mean cosine to the others (first on ties)."""
    z = np.stack([np.asarray(x, dtype=np.float64) for x in vectors])
    z /= np.linalg.norm(z, axis=1, keepdims=True).clip(1e-12)
    sims = z @ z.T
    np.fill_diagonal(sims, 0.0)
    return int(np.argmax(sims.sum(axis=1)))


def plan_merge_role(req: ChatRequest) -> str:
    p = _payload(req)
    units = list(req.variables["source_units"])
    views = [_view(p, u, "plan_merge") for u in units]
    c = central_index([x.z for x in views])
    keywords: list[str] = []
    for u in units:
        for k in u.get("keywords") or []:
            if str(k).lower() not in {x.lower() for x in keywords}:
                keywords.append(str(k))
    out = {"summary": units[c].get("summary", ""), "keywords": keywords, "decline": False,
           "reason": f"most central member {units[c]['id']}"}  # fmt: skip
    return json.dumps(out, ensure_ascii=False)


def plan_update_role(req: ChatRequest) -> str:
    p = _payload(req)
    cur = req.variables["current_unit"]
    d = offline_descriptor(cur.get("evidence") or [], n_keywords=p.n_keywords)
    return json.dumps(d | {"decline": False, "reason": "current unit re-extracted"}, ensure_ascii=False)


OFFLINE_ROLES = {
    "diagnose": diagnose_role,
    "plan_split": plan_split_role,
    "plan_merge": plan_merge_role,
    "plan_update": plan_update_role,
}
