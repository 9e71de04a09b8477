"""A per-task view of the LLM client that tallies tokens and latency and attaches the offline payload.

Why a wrapper and not a change to the roles: ATC reports tokens and latency per target (Table 3), and the
roles return only the parsed reply. Each diagnosis task and each target gets its own ``Meter`` around the
shared client, so tallies never mix across threads. The wrapper also attaches ``payload`` (live objects the
offline diagnoser and planners read: unit embeddings, the sentence embedder, the calibration) to requests
that carry none; payloads are not part of the cache key and never reach a real model.
"""

from __future__ import annotations

import dataclasses
from typing import Any


class Meter:
    """Forwards ``chat`` to ``llm``; sums tokens in/out, latency and calls of everything that went through it."""

    def __init__(self, llm: Any, payload: Any = None) -> None:
        if llm is None:
            raise ValueError("ATC needs an LLM client (resources.llm); build one with allmem.llm.build_llm")
        self.llm = llm
        self.payload = payload
        self.tokens_in = 0
        self.tokens_out = 0
        self.latency_ms = 0.0
        self.calls = 0
        self.cached = 0

    def chat(self, req: Any) -> Any:
        if self.payload is not None and getattr(req, "payload", None) is None:
            req = dataclasses.replace(req, payload=self.payload)
        res = self.llm.chat(req)
        self.calls += 1
        self.tokens_in += int(getattr(res, "tokens_in", 0) or 0)
        self.tokens_out += int(getattr(res, "tokens_out", 0) or 0)
        self.latency_ms += float(getattr(res, "latency_ms", 0.0) or 0.0)
        self.cached += int(bool(getattr(res, "cached", False)))
        return res

    def usage(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "tokens": self.tokens_in + self.tokens_out,
            "llm_latency_ms": round(self.latency_ms, 3),
            "cached": self.cached,
        }

    def __getattr__(self, name: str) -> Any:  # model, backend_name, ...: read through to the client
        return getattr(self.llm, name)
