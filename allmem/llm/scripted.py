"""The scripted backend: replies come from a script, per template, in call order. A first-class fake for tests.

Why a backend and not a monkeypatch: fail-closed behaviour (invalid JSON, missing fields, empty descriptors,
ungrounded segments) must be exercised through the same wrapper (cache, parsing, ledger, phase tags) that a
real model goes through. Select it like any backend::

    build_llm({"backend": "scripted", "script": {"plan_merge": ["not json", {"summary": "", "keywords": []}]},
               "fallback": "offline"})

``script`` maps a template name to a list of replies, used one per call in order (a string is sent as is; any
other value is JSON-encoded); a callable ``fn(request) -> str | object`` may stand in for the list. Templates
without a script, or whose list ran out, go to ``fallback``: ``offline`` (the request's offline responder) or ``error``.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from allmem.errors import LLMError
from allmem.llm.base import BackendReply, ChatRequest


class ScriptedBackend:
    """Answers from a per-template script; records every request it saw (``seen``) for assertions."""

    name = "scripted"
    can_judge = False
    offline = False  # a test fake: its numbers are not the offline backend's
    cache_only = False
    makes_network_calls = False

    def __init__(
        self,
        script: Mapping[str, Any] | None = None,
        fallback: str = "error",
        model: str = "scripted",
    ) -> None:
        if fallback not in ("offline", "error"):
            raise LLMError(
                f"llm.fallback: must be 'offline' or 'error' for the scripted backend, got {fallback!r}"
            )
        self.model = model
        self.fallback = fallback
        self._queues: dict[str, deque[Any]] = {}
        self._fns: dict[str, Callable[[ChatRequest], Any]] = {}
        for template, replies in dict(script or {}).items():
            if callable(replies):
                self._fns[template] = replies
            elif isinstance(replies, (list, tuple)):
                self._queues[template] = deque(replies)
            else:
                raise LLMError(f"llm.script.{template}: expected a list of replies or a callable")
        self._lock = threading.Lock()
        self.seen: list[ChatRequest] = []

    def cache_identity(self) -> str:
        return self.name

    def complete(self, req: ChatRequest, model: str, params: Mapping[str, Any]) -> BackendReply:
        with self._lock:
            self.seen.append(req)
            fn = self._fns.get(req.template)
            queue = self._queues.get(req.template)
            reply: Any = None
            if fn is None and queue:
                reply = queue.popleft()
        if fn is not None:
            reply = fn(req)
        if reply is None:
            if self.fallback == "offline":
                from allmem.llm.offline import offline_reply

                return BackendReply(text=offline_reply(req))
            raise LLMError(f"scripted backend: no scripted reply left for template {req.template!r}")
        text = reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)
        return BackendReply(text=text)

    def close(self) -> None:
        """Nothing to release."""
