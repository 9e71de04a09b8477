"""``atc_events.jsonl``: one line per target, one per diagnosis phase and one per consolidation run.

Why three kinds of line: the paper's Table 3 needs per-operator counts, tokens and latency (``target`` lines),
the diagnosis row (``diagnose`` lines), and Table 2 amortises a run's cost over the turns since the previous run
(``run`` lines carry ``turns_since_last``). Lines are appended as they happen, so a crashed run still keeps them.

An executed edit's ``target`` line also carries what an auditor (Table 8) or a case study (Fig. 7) reads, so the
edit can be judged from the line alone (records version 2, ``allmem.types.RECORD_VERSION``): ``before``, the
edited units as they were, ``after``, the same units and the new ones as the edit left them (each
``unit_record``: id, date, order, descriptor, visibility, evidence records), and ``links``, the version and
sibling links among them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from allmem.files import EVENTS, append_jsonl, iter_jsonl
from allmem.memory.units import Unit
from allmem.types import RecordError

EDIT_LINKS = ("version", "sibling")


def unit_record(u: Unit) -> dict[str, Any]:
    """A unit as an executed edit's line holds it: evidence, descriptor, date and visibility."""
    return {
        "id": u.id,
        "date": u.timestamp.isoformat(),
        "order": u.order,
        "summary": u.summary,
        "keywords": list(u.keywords),
        "visible": bool(u.visible),
        "evidence": u.evidence_dicts(),
    }


def edit_fields(bank: Any, before: list[dict[str, Any]], new_ids: tuple[str, ...]) -> dict[str, Any]:
    """``before``/``after``/``links`` of an executed edit: ``before`` taken just before it, the rest now."""
    ids = [b["id"] for b in before] + [n for n in new_ids if n not in {b["id"] for b in before}]
    inside = set(ids)
    links = sorted(
        [lk.type, lk.src, lk.dst]
        for uid in ids
        for type_ in EDIT_LINKS
        for lk in bank.out_links(uid, type_)
        if lk.dst in inside
    )
    return {"before": before, "after": [unit_record(bank.get(u)) for u in ids], "links": links}


class EventLog:
    """Appends JSON lines to ``<run_dir>/atc_events.jsonl`` (when a run dir is given) and keeps them in memory."""

    def __init__(self, run_dir: str | Path | None) -> None:
        self.path = Path(run_dir) / EVENTS if run_dir is not None else None
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def write(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(event)
            if self.path is not None:
                append_jsonl(self.path, event)


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """Parse an events file (or the file inside a run directory); errors name the file and the line."""
    p = Path(path)
    if p.is_dir():
        p = p / EVENTS
    if not p.exists():
        raise FileNotFoundError(f"{p}: no ATC events file")
    out = []
    for i, ev in iter_jsonl(p):
        if not isinstance(ev, dict) or "kind" not in ev:
            raise RecordError(f"{p}:{i}: an event must be an object with field 'kind'")
        out.append(ev)
    return out
