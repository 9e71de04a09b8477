"""Request and result types of the LLM layer, shared by every backend.

A role never talks to a backend directly: it renders a template into a ``ChatRequest`` and hands it to
``LLM.chat``, which caches, rate-limits, parses and books the call. Keeping these types in one small module lets
backends, the cache and the ledger agree without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from allmem.errors import LLMError

#: Every call carries one of these phase tags; cost tables are keyed by them.
PHASES: tuple[str, ...] = (
    "write",
    "retrieve",  # query-time calls of a memory system (keyword rewrites, fact filters, agent searches)
    "diagnose",
    "plan_split",
    "plan_merge",
    "plan_update",
    "generate",
    "judge",
)


class ReplayMiss(LLMError):
    """The replay backend was asked for a prompt that the cache does not hold."""

    def __init__(self, prompt_hash: str, phase: str, template: str) -> None:
        self.prompt_hash = prompt_hash
        self.phase = phase
        self.template = template
        super().__init__(
            f"replay: no cached response for prompt_hash={prompt_hash} phase={phase} template={template}; "
            "run once with llm=openai (same model, same cache path) to record it"
        )


class TransportError(RuntimeError):
    """A backend call that failed after its bounded retries; ``LLM.chat`` turns it into a failed result."""

    def __init__(self, message: str, *, retries: int = 0, status: int | None = None) -> None:
        super().__init__(message)
        self.retries = retries
        self.status = status


@dataclass(frozen=True)
class ChatRequest:
    """One prompt, already rendered from a versioned template.

    ``variables`` are the structured inputs the template was rendered from: the offline backend computes its
    answer from them instead of parsing the prompt. ``payload`` carries live objects an offline role may need
    (for example the ``AnswerRequest`` with its retrieved units); it is never part of the cache key.
    ``sample`` distinguishes repeated calls of one prompt (judge majority votes) in the cache.
    ``temperature`` is this request's sampling temperature (None: the client's ``temperature``, or
    ``judge.temperature`` for judge calls); it is part of the cache key. The offline backend ignores it.
    ``repair``: 0 for a template's own request; k for the k-th follow-up after an unusable reply.
    """

    phase: str
    template: str
    template_version: str
    messages: tuple[Mapping[str, str], ...]
    variables: Mapping[str, Any] = field(default_factory=dict)
    json_schema: Mapping[str, Any] | None = None
    model: str | None = None
    max_tokens: int | None = None
    sample: int = 0
    payload: Any = field(default=None, compare=False, repr=False)
    temperature: float | None = None
    grammar: str | None = (
        None  # the template's ``@@ grammar`` (GBNF): decoding constraint where a backend takes one
    )
    repair: int = 0  # how many repair turns (``LLM.repair``) this request holds after its template's messages

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"ChatRequest.phase: {self.phase!r} is not one of {PHASES}")
        if not self.messages:
            raise ValueError(f"ChatRequest.messages: empty for template {self.template!r}")

    @property
    def prompt_text(self) -> str:
        """All message contents joined: what token counting and dry-run estimates measure."""
        return "\n".join(str(m.get("content", "")) for m in self.messages)


class OfflineResponder(Protocol):
    """What a request's ``payload`` implements to be answerable by the offline backend (and in dry runs).

    The caller that builds a request knows its role, so it supplies the offline stand-in; the LLM layer never
    imports its callers.
    """

    def offline_reply(self, req: ChatRequest) -> str: ...


@dataclass(frozen=True)
class ParseFailure:
    """A reply that could not be read as the template's JSON output; the caller decides what to do."""

    kind: str  # "no_json" | "invalid_json" | "schema"
    message: str
    raw: str


@dataclass(frozen=True)
class BackendReply:
    """What a backend returns for one uncached call. Token counts are None when the backend cannot tell."""

    text: str
    tokens_in: int | None = None
    tokens_out: int | None = None
    retries: int = 0


@dataclass(frozen=True)
class ChatResult:
    """The outcome of ``LLM.chat``: never an exception for a bad reply, a typed failure instead.

    ``data`` is the parsed JSON when the request had a schema and the reply matched it; otherwise
    ``parse_error`` says why. ``error`` is set when no reply came at all (transport failure after retries,
    dry run).
    """

    text: str
    phase: str
    template: str
    backend: str
    model: str
    prompt_hash: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    cached: bool
    data: Any = None
    parse_error: ParseFailure | None = None
    error: str | None = None
    estimated: bool = False  # tokens counted locally (offline backend, dry run), not reported by a server

    @property
    def ok(self) -> bool:
        return self.error is None and self.parse_error is None
