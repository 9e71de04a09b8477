"""Test helpers shared by the test modules (the fake embedder is first-class: ``allmem.embed.HashEmbedder``).

A helper module, not a test module: test modules import from here, never from each other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from allmem.embed import HashEmbedder
from allmem.llm.roles import RoleFailure
from allmem.memory.bank import MemoryBank
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


# ATC cases: make_bank() holds one unit per text, linked in order (tests/test_atc_executor.py, test_atc_openai.py).
ATC_TEXTS = [
    "I went hiking at Zion on Saturday. My sister works as a nurse.",  # u000000: conflated
    "I drive a Honda Civic.",  # u000001
    "As I said, I drive a Honda Civic.",  # u000002: restates u000001
    "I live in Boston.",  # u000003
    "I moved to Denver, I no longer live in Boston.",  # u000004: supersedes u000003
]


def make_bank() -> MemoryBank:
    """A bank of ``ATC_TEXTS`` (64-dim hash vectors), one minute apart from 13:00, temporally and semantically linked."""
    t0 = T0.replace(minute=0)
    emb = HashEmbedder(dim=64)
    bank = MemoryBank(dim=emb.dim, d_sigma=3)
    prev = None
    for i, t in enumerate(ATC_TEXTS):
        rec = {
            "speaker": "Ann",
            "text": t,
            "date": (t0 + timedelta(minutes=i)).isoformat(),
            "source_ids": [f"D1:{i + 1}"],
        }
        uid = bank.create_unit(
            [rec], f"Ann: {t}", ["Ann"], emb.encode([t])[0], t0 + timedelta(minutes=i), order=i
        )
        if prev is not None:
            bank.add_link("temporal", prev, uid)
            bank.link_semantic(prev, uid)
        prev = uid
    return bank
