"""The ``atc:`` config node, parsed once into a frozen dataclass so that a typo fails before any ingestion."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from allmem.memory.units import EMBED_FORMATS

OPS: tuple[str, ...] = ("split", "merge", "update")  # also the fixed execution order


@dataclass(frozen=True)
class ATCConfig:
    """Consolidation settings (docs/METHOD.md, ATC). ``theta`` is the shared threshold; ``theta_<op>`` overrides it.

    Triggers: every ``every_sessions`` sessions, and/or every ``every_turns`` turns, and once at the end of the
    stream when ``at_stream_end``; ``enabled: false`` turns ATC off (the no-ATC ablation).
    """

    enabled: bool = True
    every_sessions: int | None = 3
    every_turns: int | None = None
    at_stream_end: bool = True
    theta: float = 0.9
    theta_split: float | None = None
    theta_merge: float | None = None
    theta_update: float | None = None
    split: bool = True  # operator switches: the no-Split / no-Merge / no-Update ablations
    merge: bool = True
    update: bool = True
    top_k: int = 10  # visible neighbours per local context (plus the temporal predecessor)
    workers: int = 4  # diagnosis worker pool; results are gathered in buffer order
    coherence_guard: bool = False  # the authors' code: skip a merge whose centroid coherence is below the min
    coherence_min: float = 0.7
    merge_phatic: bool = True  # offline diagnoser: merge fact-free utterances ("Thanks!") of one speaker
    support_min: float = 0.5  # share of a plan's summary content words that must occur in its sources
    n_keywords: int = 12
    embed_format: str = "paper"  # must match method.write.embed_format (the string z is computed from)
    max_merge_size: int = 8

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
        if self.embed_format not in EMBED_FORMATS:
            raise ValueError(f"atc.embed_format must be one of {EMBED_FORMATS}, got {self.embed_format!r}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> ATCConfig:
        """Build from the config node; unknown keys are an error naming ``atc.<key>``."""
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"atc: unknown keys {['atc.' + k for k in unknown]}; known: {sorted(known)}")
        return cls(**d)

    def threshold(self, op: str) -> float:
        """theta_op when set, else the shared theta."""
        v = getattr(self, f"theta_{op}")
        return float(self.theta if v is None else v)

    @property
    def ops(self) -> tuple[str, ...]:
        """The operators switched on, in execution order."""
        return tuple(op for op in OPS if getattr(self, op))
