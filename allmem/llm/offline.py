"""The offline backend: deterministic stand-ins for every prompt's role, supplied by the caller of each request.

It never parses a prompt and never names its callers. A caller that wants its prompt answered offline attaches a
payload to the request (``build_request(..., payload=...)``) that implements ``OfflineResponder``: a method
``offline_reply(request) -> str`` returning the JSON text an LLM would have replied, computed from the request's
structured ``variables`` and the payload's live objects (embeddings, the extractive reader). The reply then goes
through the same wrapper (cache, ledger, parsing, phase tags) as a real model's, so the code that applies an
answer is the same offline and online.

Judge prompts carry no responder on purpose: an offline proxy must never be reported as 4o-J.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from allmem.errors import LLMError
from allmem.llm.base import BackendReply, ChatRequest


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


class OfflineBackend:
    """Computes every role locally; token counts are measured on the rendered prompt by the wrapper."""

    name = "offline"
    can_judge = False
    offline = True
    cache_only = False
    makes_network_calls = False

    def __init__(self, model: str = "offline") -> None:
        self.model = model

    def cache_identity(self) -> str:
        return self.name

    def complete(self, req: ChatRequest, model: str, params: Mapping[str, Any]) -> BackendReply:
        return BackendReply(text=offline_reply(req))

    def close(self) -> None:
        """Nothing to release."""
