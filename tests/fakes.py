"""Test helpers shared by the test modules (the fake embedder is first-class: ``allmem.embed.HashEmbedder``).

A helper module, not a test module: test modules import from here, never from each other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from allmem.llm.roles import RoleFailure
from allmem.memory.descriptor import Descriptor
from allmem.types import SessionInfo, Turn

T0 = datetime(2023, 5, 8, 13, 56)


def echo_describe(llm: Any, records: Sequence[Mapping[str, Any]]) -> Descriptor:
    """Summary = the text; keywords = capitalised words: deterministic and easy to reason about."""
    text = " ".join(str(r["text"]) for r in records)
    return Descriptor(summary=text, keywords=tuple(w for w in re.findall(r"[A-Z][a-z]+", text)))


def failing_describe(llm: Any, records: Sequence[Mapping[str, Any]]) -> RoleFailure:
    return RoleFailure("descriptor", "invalid_json", "scripted failure")


def make_turns(texts: Sequence[str], session: int = 1, speaker: str = "Ann") -> list[Turn]:
    """One turn per text, a minute apart, on day ``session`` after ``T0``; ids ``D<session>:<n>``."""
    return [
        Turn(
            id=f"D{session}:{i + 1}",
            session_id=f"S{session}",
            speaker=speaker,
            text=t,
            timestamp=T0 + timedelta(days=session, minutes=i),
            order=i,
            source_id=f"D{session}:{i + 1}",
        )
        for i, t in enumerate(texts)
    ]


def stream_sessions(system: Any, sessions: Sequence[Sequence[str]], dialogue_id: str = "conv-x") -> None:
    """Feed a memory system one dialogue: each list of texts is a session (``make_turns``), then end the stream."""
    system.reset(dialogue_id)
    for i, texts in enumerate(sessions, start=1):
        info = SessionInfo(f"S{i}", T0, i - 1)
        system.start_session(info)
        for turn in make_turns(texts, session=i):
            system.ingest(turn)
        system.end_session(info)
    system.end_stream()
