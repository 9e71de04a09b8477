"""The ``atc:`` config node, parsed once into a frozen dataclass so that a typo fails before any ingestion."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

OPS: tuple[str, ...] = ("split", "merge", "update")  # also the fixed execution order


@dataclass(frozen=True)
class ATCConfig:
    """Consolidation settings (docs/METHOD.md, ATC). ``theta`` is the shared threshold; ``theta_<op>`` overrides it.

    Triggers: every ``every_sessions`` sessions, and/or every ``every_turns`` turns, and once at the end of the
    stream when ``at_stream_end``; ``enabled: false`` turns ATC off (the no-ATC ablation).
    """

    WHERE: ClassVar[str] = "atc"  # its node in the config; values: configs/method/allmem.yaml

    enabled: bool
    every_sessions: int | None
    every_turns: int | None
    at_stream_end: bool
    theta: float
    theta_split: float | None
    theta_merge: float | None
    theta_update: float | None
    split: bool  # operator switches: the no-Split / no-Merge / no-Update ablations
    merge: bool
    update: bool
    top_k: int  # visible neighbours per local context (plus the temporal predecessor)
    workers: int  # diagnosis worker pool (at least llm.max_concurrency); results are gathered in buffer order
    coherence_guard: bool  # the authors' code: skip a merge whose centroid coherence is below the min
    coherence_min: float
    merge_phatic: bool  # offline diagnoser: merge fact-free utterances ("Thanks!") of one speaker
    support_min: float  # share of a plan's summary content words that must occur in its sources
    n_keywords: int
    max_merge_size: int

    def __post_init__(self) -> None:
        for name in ("theta", "theta_split", "theta_merge", "theta_update", "coherence_min", "support_min"):
            v = getattr(self, name)
            if v is not None and not 0.0 <= float(v) <= 1.0:
                raise ValueError(f"atc.{name} must be in [0, 1], got {v}")
        for name in ("every_sessions", "every_turns"):
            v = getattr(self, name)
            if v is not None and int(v) < 1:
                raise ValueError(f"atc.{name} must be >= 1 or null, got {v}")
        if self.top_k < 1 or self.workers < 1 or self.max_merge_size < 2:
            raise ValueError("atc.top_k and atc.workers must be >= 1, atc.max_merge_size >= 2")

    def threshold(self, op: str) -> float:
        """theta_op when set, else the shared theta."""
        v = getattr(self, f"theta_{op}")
        return float(self.theta if v is None else v)

    @property
    def ops(self) -> tuple[str, ...]:
        """The operators switched on, in execution order."""
        return tuple(op for op in OPS if getattr(self, op))
