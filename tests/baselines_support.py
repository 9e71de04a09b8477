"""Helpers for the baseline tests: a model-free embedder with pinned vectors, a scripted LLM, a feeder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from allmem.embed import HashEmbedder
from allmem.llm import build_llm
from allmem.systems import MemorySystem
from allmem.types import SessionInfo, Turn

T0 = datetime(2023, 5, 8, 13, 0)


class TableEmbedder(HashEmbedder):
    """Bag-of-words vectors, except for texts whose vector a test pins (normalised, padded to ``dim``)."""

    def __init__(self, table: Mapping[str, Sequence[float]] | None = None, dim: int = 64) -> None:
        super().__init__(dim=dim)
        self.table: dict[str, np.ndarray] = {}
        for text, vec in (table or {}).items():
            self.pin(text, vec)

    def pin(self, text: str, vec: Sequence[float]) -> None:
        v = np.zeros(self.dim, dtype=np.float32)
        v[: len(vec)] = vec
        self.table[text] = v / np.linalg.norm(v)

    def encode(self, texts: list[str]) -> np.ndarray:
        out = super().encode([t for t in texts])
        for i, t in enumerate(texts):
            if t in self.table:
                out[i] = self.table[t]
        return out

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])[0]


def scripted(script: Mapping[str, Any]) -> Any:
    """An LLM answering ``script`` (template → replies, in call order), the offline roles for the rest."""
    return build_llm(
        {
            "_target_": "allmem.llm.scripted.ScriptedBackend",
            "backend": "scripted",
            "script": dict(script),
            "fallback": "offline",
            "cache": {"enabled": False},
            "max_concurrency": 1,
        }
    )  # one at a time: a script is consumed in call order


def seen(llm: Any, template: str) -> list[Any]:
    """The requests the scripted backend received for ``template``, in order."""
    return [r for r in llm.backend.seen if r.template == template]


def turn(
    tid: str, speaker: str, text: str, minutes: int = 0, order: int = 0, caption: str | None = None
) -> Turn:
    session = tid.split(":")[0]
    day = int(session.lstrip("D") or 1)
    ts = T0 + timedelta(days=7 * (day - 1), minutes=minutes)
    return Turn(tid, session, speaker, text, ts, order, caption=caption, source_id=tid)


def sessions(*groups: Sequence[tuple[str, str, str]]) -> list[list[Turn]]:
    """Sessions of ``(id, speaker, text)`` triples, numbered in stream order."""
    out, order = [], 0
    for group in groups:
        turns = []
        for i, (tid, speaker, text) in enumerate(group):
            turns.append(turn(tid, speaker, text, minutes=i, order=order))
            order += 1
        out.append(turns)
    return out


def add_session(system: MemorySystem, turns: Sequence[Turn], index: int = 0) -> None:
    info = SessionInfo(turns[0].session_id, turns[0].timestamp, index)
    system.start_session(info)
    for t in turns:
        system.ingest(t)
    system.end_session(info)


def feed(
    system: MemorySystem, groups: list[list[Turn]], dialogue_id: str = "conv-t", end: bool = True
) -> None:
    system.reset(dialogue_id)
    for i, turns in enumerate(groups):
        add_session(system, turns, i)
    if end:
        system.end_stream()
