"""The one interface every memory system implements (All-Mem and every baseline).

The harness streams a dialogue into a system chronologically, then asks it queries. The harness, not the
system, enforces the context budget, generates answers and scores them.

Lifecycle per dialogue::

    system.reset(dialogue_id)
    for session in dialogue.sessions:           # chronological
        system.start_session(session.info)
        for turn in session.turns:
            system.ingest(turn)
        system.end_session(session.info)
    system.end_stream()
    result = system.retrieve(query_text, question_date)   # many times

With ``protocol.ask`` = ``after_evidence`` or ``both`` (``allmem.run.asking``) questions are also asked mid-stream,
right after ``end_session`` of the session that holds their last evidence turn::

        system.end_session(session.info)
        system.checkpoint()                             # once, before that session's questions
        result = system.retrieve(query_text, question_date)

The contract (docs/DESIGN.md, "Questions along the stream"): ``checkpoint`` makes every turn ingested so far
searchable (it flushes write buffers and builds indexes); it never runs consolidation that the system's own
schedule has not triggered, and never the end-of-stream work (``end_stream`` alone does that). A mid-stream
``retrieve`` sees only turns ingested before it: the harness has not streamed the later ones yet, and the bank
cache (which holds a whole stream's bank) is off unless every question is asked at the end.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from allmem.types import RetrievalResult, SessionInfo, Turn


@dataclass
class Resources:
    """Shared services a system may use; built once per run by the runner.

    ``embedder``: an ``allmem.embed`` embedder; ``llm``: an ``allmem.llm`` client (None where nothing calls one);
    ``run_dir``: where a system may write its own artefacts (e.g. ``atc_events.jsonl``).
    """

    embedder: Any = None
    llm: Any = None
    run_dir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class MemorySystem(ABC):
    """Base class. Subclasses are built from ``configs/method/<name>.yaml`` with ``resources=`` passed in."""

    name: str = "system"
    # How the system finds memories at question time, for Table 1's like-for-like footer: "dense" (embedding
    # cosine only), "lexical" (term matching only), "dense+lexical", "dense+graph", or "recency" (no search).
    search_kind: str = "dense"

    def __init__(self, resources: Resources | None = None) -> None:
        self.resources = resources or Resources()

    @abstractmethod
    def reset(self, dialogue_id: str) -> None:
        """Forget everything: a new dialogue's memory starts empty."""

    def start_session(self, session: SessionInfo) -> None:  # noqa: B027 - optional hook
        """A session begins (all its turns share ``session.date``)."""

    @abstractmethod
    def ingest(self, turn: Turn) -> None:
        """Write one turn into memory (online path)."""

    def end_session(self, session: SessionInfo) -> None:  # noqa: B027 - optional hook
        """A session ended (All-Mem triggers consolidation here)."""

    def end_stream(self) -> None:  # noqa: B027 - optional hook
        """No more turns will come for this dialogue."""

    def checkpoint(self) -> None:  # noqa: B027 - optional hook
        """Questions come mid-stream: make every turn ingested so far searchable (flush buffered writes, build
        indexes), without forcing consolidation or end-of-stream work. The default does nothing: right for a
        system whose ``retrieve`` already sees every ingested turn."""

    @abstractmethod
    def retrieve(self, query: str, when: datetime | None = None) -> RetrievalResult:
        """Ranked units for ``query`` asked at time ``when``; best first."""

    def stats(self) -> dict[str, Any]:
        """Counters for the run's metrics (unit counts, tokens spent, ...). JSON-serialisable."""
        return {}

    # ------------------------------------------------------------------ depth (the equal-context view)
    #: The attributes holding the retrieval depth that ``set_depth`` scales (e.g. ``("k",)``): each a positive
    #: int, or None for "no cut" (already as deep as the memory goes). Empty: the system has no depth to raise
    #: (a run with ``budget.fill`` refuses it) unless it overrides ``set_depth``.
    depth_attrs: tuple[str, ...] = ()

    def set_depth(self, factor: int) -> None:
        """Scale the retrieval depth to ``factor`` times the configured one for the following ``retrieve`` calls
        (``factor`` 1 restores it). The harness raises it until the packed context fills the budget or the
        memory has nothing more (``budget.fill``, ``allmem.budget.fill``; each system's rule: docs/BASELINES.md,
        "Equal context"). The default scales every attribute named in ``depth_attrs``."""
        check_depth_factor(factor)
        if not self.depth_attrs:
            raise NotImplementedError(f"{type(self).__name__} has no retrieval depth to raise (depth_attrs)")
        base = self.__dict__.setdefault("_depth_base", {a: getattr(self, a) for a in self.depth_attrs})
        for attr, value in base.items():
            setattr(self, attr, None if value is None else value * factor)

    @property
    def can_deepen(self) -> bool:
        """Whether ``set_depth`` is available (``depth_attrs`` named, or ``set_depth`` overridden)."""
        return bool(self.depth_attrs) or type(self).set_depth is not MemorySystem.set_depth


def check_depth_factor(factor: int) -> None:
    """``set_depth``'s argument: a positive int (1 = the configured depth)."""
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ValueError(f"depth factor must be a positive integer, got {factor!r}")
