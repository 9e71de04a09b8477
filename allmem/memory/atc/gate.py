"""Confidence gating and normalisation (Norm): raw diagnosis proposals -> three operator queues.

Why a separate, rule-only stage: everything after the model's proposals must be deterministic, and a model may
cite ids in odd forms, repeat a proposal from two contexts, or name archived units. Norm canonicalises ids,
drops invalid targets (missing, wrong visibility, wrong arity) and duplicates, and keeps buffer order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allmem.memory.atc.config import OPS, ATCConfig
from allmem.memory.bank import MemoryBank

_ID = re.compile(r"^\s*[uU]?0*(\d+)\s*$")


@dataclass(frozen=True)
class Target:
    """One queued edit. ``ids``: (v,) for split, the set (bank order) for merge, (current, superseded) for update."""

    op: str
    ids: tuple[str, ...]
    p: float
    origin: str  # the buffered unit whose local context proposed it
    reason: str = ""


@dataclass(frozen=True)
class Dropped:
    """A proposal that did not reach a queue, and why (logged for the recall analysis)."""

    op: str
    ids: tuple[str, ...]
    p: float | None
    origin: str
    why: str


def canonical_id(raw: Any, bank: MemoryBank) -> str | None:
    """The bank id a model meant: exact, else the ``u000042`` form of a bare or unpadded number."""
    s = str(raw).strip()
    if s in bank:
        return s
    m = _ID.match(s)
    if m:
        cand = f"u{int(m.group(1)):06d}"
        if cand in bank:
            return cand
    return None


def _normalise(
    op: str, raw_ids: Sequence[Any], bank: MemoryBank, cfg: ATCConfig
) -> tuple[tuple[str, ...] | None, str]:
    ids: list[str] = []
    for r in raw_ids:
        c = canonical_id(r, bank)
        if c is None:
            return None, f"unknown id {r!r}"
        if c not in ids:
            ids.append(c)
    if op == "split" and len(ids) != 1:
        return None, f"split needs one id, got {len(ids)}"
    if op == "update" and len(ids) != 2:
        return None, f"update needs two distinct ids, got {len(ids)}"
    if op == "merge":
        if not 2 <= len(ids) <= cfg.max_merge_size:
            return None, f"merge needs 2..{cfg.max_merge_size} distinct ids, got {len(ids)}"
        ids.sort(key=lambda u: bank.get(u).row)  # a set: one canonical order
    hidden = [u for u in ids if not bank.is_visible(u)]
    if hidden:
        return None, f"not visible: {hidden}"
    return tuple(ids), ""


def gate(
    proposals: Iterable[tuple[str, Sequence[Mapping[str, Any]]]], bank: MemoryBank, cfg: ATCConfig
) -> tuple[dict[str, list[Target]], list[Dropped]]:
    """Queues per operator from ``(origin unit, raw proposals)`` pairs given in buffer order.

    A proposal is kept when its op is on, ``p >= theta_op``, and its target normalises; a duplicate keeps the
    first position and the highest confidence.
    """
    queues: dict[str, list[Target]] = {op: [] for op in OPS}
    where: dict[tuple[str, tuple[str, ...]], int] = {}
    dropped: list[Dropped] = []
    for origin, raws in proposals:
        for raw in raws:
            op = str(raw.get("op", "")).strip().lower()
            raw_ids = raw.get("target") or []
            if isinstance(raw_ids, str):
                raw_ids = [raw_ids]
            try:
                p = float(raw.get("p"))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                dropped.append(Dropped(op, tuple(map(str, raw_ids)), None, origin, "no confidence"))
                continue
            if op not in OPS:
                dropped.append(Dropped(op, tuple(map(str, raw_ids)), p, origin, f"unknown op {op!r}"))
                continue
            if op not in cfg.ops:
                dropped.append(Dropped(op, tuple(map(str, raw_ids)), p, origin, "operator off"))
                continue
            if not p >= cfg.threshold(op):
                dropped.append(Dropped(op, tuple(map(str, raw_ids)), p, origin, "below theta"))
                continue
            ids, why = _normalise(op, list(raw_ids), bank, cfg)
            if ids is None:
                dropped.append(Dropped(op, tuple(map(str, raw_ids)), p, origin, why))
                continue
            key = (op, ids)
            if key in where:
                i = where[key]
                old = queues[op][i]
                if p > old.p:
                    queues[op][i] = Target(op, ids, p, old.origin, old.reason)
                dropped.append(Dropped(op, ids, p, origin, "duplicate"))
                continue
            where[key] = len(queues[op])
            queues[op].append(Target(op, ids, p, origin, str(raw.get("reason", ""))))
    return queues, dropped
