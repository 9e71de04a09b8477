"""What the three turn-level baselines share: a per-dialogue list of turns and the turn → ``Retrieved`` mapping.

Every baseline indexes the same text (``Turn.render()``: ``Speaker: text [image: caption]``) and returns units
that R@k credits with the turn's ``source_id``, so the baselines differ only in how they rank.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np

from allmem.systems import MemorySystem, Resources
from allmem.types import RetrievalResult, Retrieved, Turn


def turn_unit(turn: Turn, score: float) -> Retrieved:
    """The retrieval unit of a turn. ``source_id`` falls back to the turn id for streams that leave it unset."""
    return Retrieved(turn.id, (turn.utterance(),), (turn.source_id or turn.id,), float(score), turn.timestamp)


def check_k(k: int | None, owner: str) -> int | None:
    """``k`` must be a positive int or None (no cut); the error names the config field."""
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"configs/method/{owner}.yaml: k must be a positive integer or null, got {k!r}")
    return k


class TurnMemory(MemorySystem):
    """Base for systems whose memory is the raw turn list of the current dialogue."""

    depth_attrs = ("k",)  # equal context: the top k turns (null k: every turn already)

    def __init__(self, k: int | None = None, resources: Resources | None = None) -> None:
        super().__init__(resources)
        self.k = check_k(k, self.name)
        self.turns: list[Turn] = []
        self.dialogue_id: str | None = None

    def reset(self, dialogue_id: str) -> None:
        self.dialogue_id = dialogue_id
        self.turns = []

    def ingest(self, turn: Turn) -> None:
        self.turns.append(turn)

    def checkpoint(self) -> None:
        self.end_stream()  # a turn list's end_stream only builds its index (embeddings, BM25 statistics)

    def ranked(self, scores: np.ndarray, timings_ms: dict[str, float]) -> RetrievalResult:
        """Top ``k`` turns by score, ties broken by stream order (stable sort), best first."""
        order = np.argsort(-scores, kind="stable")
        if self.k is not None:
            order = order[: self.k]
        units = tuple(turn_unit(self.turns[i], scores[i]) for i in order)
        return RetrievalResult(units=units, timings_ms=timings_ms)

    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:  # pragma: no cover
        raise NotImplementedError

    def stats(self) -> dict[str, int]:
        return {"turns": len(self.turns)}
