"""The offline backend: deterministic stand-ins for every prompt's role, supplied by the caller of each request.

It never parses a prompt and never names its callers. A caller that wants its prompt answered offline attaches a
payload to the request (``build_request(..., payload=...)``) that implements ``OfflineResponder``: a method
``offline_reply(request) -> str`` returning the JSON text an LLM would have replied, computed from the request's
structured ``variables`` and the payload's live objects (embeddings, the extractive reader). The reply then goes
through the same wrapper (cache, ledger, parsing, phase tags) as a real model's, so the code that applies an
answer is the same offline and online.

Judge prompts carry no responder on purpose: an offline proxy must never be reported as 4o-J.

A responder whose reply is costly and depends on a few inputs only (the descriptor's YAKE keywords) also declares
them: ``offline_inputs(request)``, JSON data naming everything the reply is computed from besides allmem's code
(for the descriptor: its records' speakers, texts and captions, its caps, and the versions of the libraries it
calls and of Python, ``cache_store.library_identity``). The backend then keeps its replies in
``<cache>/llm/offline.sqlite`` (``OFFLINE_REPLIES``, in ``llm_cache_dir``), keyed by those inputs and the
fingerprint of the code that can change a result (``cache_store.code_key``), so the methods of a sweep that
describe the same turns (allmem, allmem_hybrid and the ablations), and a session a later haystack repeats under
another date, compute it once. A reply read there is the text computed here (checked by sha256); it still goes
through the wrapper as a fresh call (tokens counted on the prompt and the reply, booked uncached), so nothing a
run records depends on this store but its time. The store only saves time: a damaged file is set aside, and one
that cannot be used (a read-only folder, a full disk, a lock held past SQLite's timeout) is left alone for the rest
of the process with one warning, and replies are computed. The response cache (``llm.cache``) stays off offline:
its key is the prompt, which cannot see the code.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from allmem import cache_store
from allmem.cache_store import TextStore
from allmem.errors import LLMError
from allmem.fingerprint import RESULT_SOURCES
from allmem.llm.base import BackendReply, ChatRequest

log = logging.getLogger(__name__)
OFFLINE_REPLIES = "offline.sqlite"  # the offline reply store's file, in the LLM cache folder (llm_cache_dir)


def has_offline_reply(req: ChatRequest) -> bool:
    """Whether the request's payload can answer it offline."""
    return callable(getattr(req.payload, "offline_reply", None))


def offline_reply(req: ChatRequest) -> str:
    """The payload's offline answer to ``req``; a clear error when the caller attached none."""
    if not has_offline_reply(req):
        raise LLMError(
            f"offline backend: the request for template {req.template!r} carries no offline responder "
            f"(payload: {type(req.payload).__name__}); judge templates have none by design "
            "(use llm=openai or llm=replay to judge)"
        )
    return str(req.payload.offline_reply(req))


def reply_key(req: ChatRequest) -> str | None:
    """The offline reply store's key of ``req``: its template, its responder's class and declared inputs, and the
    fingerprint of the result sources; None when the responder declares no inputs (computed every time)."""
    inputs = getattr(req.payload, "offline_inputs", None)
    if not callable(inputs):
        return None
    role = f"{type(req.payload).__module__}.{type(req.payload).__qualname__}"
    return cache_store.code_key(RESULT_SOURCES, req.template, role, inputs(req), length=40)


class OfflineBackend:
    """Computes every role locally; token counts are measured on the rendered prompt by the wrapper."""

    name = "offline"
    can_judge = False
    offline = True
    cache_only = False
    makes_network_calls = False

    def __init__(self, model: str = "offline", replies_file: str | Path | None = None) -> None:
        self.model = model
        self.replies_file = Path(replies_file) if replies_file is not None else None
        # opened on first use: a backend that is built and never called writes nothing
        self._replies: TextStore | None = None
        self._lock = threading.Lock()

    def cache_identity(self) -> str:
        return self.name

    def complete(self, req: ChatRequest, model: str, params: Mapping[str, Any]) -> BackendReply:
        key = reply_key(req) if self.replies_file is not None else None
        store = self._store() if key is not None else None
        if store is None or key is None:
            return BackendReply(text=offline_reply(req))
        text = self._use(lambda: store.get(key))
        if text is None:
            text = offline_reply(req)
            self._use(lambda: store.put(key, text))
        return BackendReply(text=text)

    def _store(self) -> TextStore | None:
        """The reply store, opened once per process; None once it could not be used."""
        with self._lock:
            if self._replies is None and self.replies_file is not None:
                self._replies = self._use(lambda: TextStore(self.replies_file))
            return self._replies

    def _use(self, work: Any) -> Any:
        """``work()``, or None when the store cannot be used: then it is left alone, with one warning."""
        try:
            return work()
        except (sqlite3.Error, OSError) as exc:
            if self.replies_file is not None:
                log.warning(
                    "offline reply cache %s: cannot be used (%s); replies are computed without it",
                    self.replies_file, exc,
                )  # fmt: skip
            self.replies_file = None
            return None

    def close(self) -> None:
        """Close the reply store (it opens again on the next call)."""
        with self._lock:
            if self._replies is not None:
                self._replies.close()
                self._replies = None
