"""Test doubles for the memory tests: a bag-of-words hash embedder and scripted descriptor roles.

Kept tiny and deterministic so memory tests never load the real model; the doubles are checked here too.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from allmem.llm.roles import RoleFailure
from allmem.memory.descriptor import Descriptor
from allmem.types import Turn

T0 = datetime(2023, 5, 8, 13, 56)


class HashEmbedder:
    """Each lowercase word adds +-1 to one of ``dim`` buckets; rows L2-normalised (like ``Embedder.encode``)."""

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls: list[int] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(len(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for w in re.findall(r"[a-z0-9]+", text.lower()):
                h = hashlib.blake2b(w.encode(), digest_size=8).digest()
                out[i, h[0] % self.dim] += 1.0 if h[1] % 2 == 0 else -1.0
            n = np.linalg.norm(out[i])
            if n:
                out[i] /= n
        return out


def echo_describe(llm: Any, records: Sequence[Mapping[str, Any]]) -> Descriptor:
    """Summary = the text; keywords = capitalised words: deterministic and easy to reason about."""
    text = " ".join(str(r["text"]) for r in records)
    return Descriptor(summary=text, keywords=tuple(w for w in re.findall(r"[A-Z][a-z]+", text)))


def failing_describe(llm: Any, records: Sequence[Mapping[str, Any]]) -> RoleFailure:
    return RoleFailure("descriptor", "invalid_json", "scripted failure")


def make_turns(texts: Sequence[str], session: int = 1, speaker: str = "Ann") -> list[Turn]:
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


def test_hash_embedder_is_deterministic_and_normalised() -> None:
    e = HashEmbedder()
    a, b = e.encode(["hiking in the alps", "hiking in the alps"])
    np.testing.assert_array_equal(a, b)
    assert abs(float(np.linalg.norm(a)) - 1.0) < 1e-6
    assert float(e.encode(["cats"])[0] @ e.encode(["dogs"])[0]) < 1.0


def test_echo_describe_keeps_text_and_capitalised_words() -> None:
    d = echo_describe(None, [{"text": "Ann went to Paris"}])
    assert (d.summary, d.keywords) == ("Ann went to Paris", ("Ann", "Paris"))
