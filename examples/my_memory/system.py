"""``WordOverlap``: every turn is a unit; a query ranks them by how many of its words they share, the more recent
first among equals. Small on purpose: it shows what a ``MemorySystem`` must do (reset, ingest, retrieve with the
turns each unit came from) and nothing else."""

from __future__ import annotations

import re
from datetime import datetime

from allmem.systems import MemorySystem, Resources
from allmem.types import RetrievalResult, Retrieved, Turn

_WORD = re.compile(r"\w+")
MIN_LEN = 3  # words shorter than this ("a", "I", "is") count for nothing


def words(text: str) -> set[str]:
    """The lower-cased words of ``text`` with at least ``MIN_LEN`` characters."""
    return {w.lower() for w in _WORD.findall(text) if len(w) >= MIN_LEN}


class WordOverlap(MemorySystem):
    """Built from ``configs/method/my_memory.yaml``: ``k`` units per query at most."""

    name = "my_memory"

    def __init__(self, resources: Resources | None = None, k: int = 20) -> None:
        super().__init__(resources)
        if k < 1:
            raise ValueError(f"method.k: must be >= 1, got {k}")
        self.k = k
        self.turns: list[Turn] = []

    def reset(self, dialogue_id: str) -> None:
        self.turns = []

    def ingest(self, turn: Turn) -> None:
        self.turns.append(turn)

    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        asked = words(query)
        scored = [(len(asked & words(t.render())), t.order, t) for t in self.turns]
        scored.sort(key=lambda s: (-s[0], -s[1]))  # most shared words, then most recent
        units = tuple(
            Retrieved.of_text(
                t.id, t.text, (t.source_id or t.id,), float(n), t.timestamp, t.speaker, t.caption
            )
            for n, _, t in scored[: self.k]
        )
        return RetrievalResult(units=units)

    def stats(self) -> dict[str, int]:
        return {"n_units": len(self.turns)}
