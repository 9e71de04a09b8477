"""Model-free test doubles shared by the test modules."""

from __future__ import annotations

import hashlib
import re

import numpy as np


class BowEmbedder:
    """Hashed bag of words, L2-normalised: deterministic, thread-safe and instant (no model).

    Each word lands in bucket ``int(sha1(word)[:hash_bytes]) % dim``; words that share a bucket look alike.
    """

    def __init__(self, dim: int = 64, hash_bytes: int = 1) -> None:
        self.dim, self.hash_bytes = dim, hash_bytes

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"[a-z0-9]+", t.lower()):
                digest = hashlib.sha1(w.encode()).digest()[: self.hash_bytes]
                out[i, int.from_bytes(digest, "big") % self.dim] += 1.0
            out[i] /= np.linalg.norm(out[i]) or 1.0
        return out
