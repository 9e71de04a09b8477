"""``atc_events.jsonl``: one line per target, one per diagnosis phase and one per consolidation run.

Why three kinds of line: the paper's Table 3 needs per-operator counts, tokens and latency (``target`` lines),
the diagnosis row (``diagnose`` lines), and Table 2 amortises a run's cost over the turns since the previous run
(``run`` lines carry ``turns_since_last``). Lines are appended as they happen, so a crashed run still keeps them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from allmem.run.files import EVENTS, append_jsonl, iter_jsonl
from allmem.types import RecordError


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
