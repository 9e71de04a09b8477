"""The ``openai`` backend: the official client against any OpenAI-compatible ``base_url``.

It runs its own retry loop (the client's ``max_retries`` is 0) so that retries are bounded, counted in the ledger,
logged one warning each and testable. Its timeouts and wall-clock limits, and which 200s are failed tries, are in
``allmem/llm/README.md``. The HTTP client ignores proxy variables and redirects, so requests go only to the
configured base URL; the API key is read from the variable the config names, kept only in the client object, and
scrubbed from every error message this module raises.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from allmem.errors import LLMError
from allmem.llm.base import BackendReply, ChatRequest, TransportError
from allmem.llm.limiter import RateLimiter
from allmem.llm.retry import Retrying, retry_after_s

log = logging.getLogger("allmem.llm")


def scrub(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` masked."""
    return text.replace(secret, "***") if secret else text


NO_KEY = "no-key"  # sent where llm.api_key_env is null: the local server ignores it


class OpenAIBackend:
    """Chat completions over HTTP; one client shared by threads (the client is thread-safe)."""

    name = "openai"
    can_judge = True
    offline = False
    cache_only = False
    makes_network_calls = True

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        max_retries: int = 4,
        try_timeout_s: float = 120.0,
        call_timeout_s: float = 600.0,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        max_concurrency: int = 4,
        rpm: int | None = None,
        tpm: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        pacing_file: str | Path | None = None,
        json_schema: bool = False,
        grammar: bool = False,
        label: str = "openai",
    ) -> None:
        if not base_url:
            raise LLMError("llm.base_url: required for backend openai (e.g. https://api.openai.com/v1)")
        self.name = str(label)  # what results and the cache call this backend (llm=local: local)
        self.model = model
        # Decoding constraints of llama.cpp's server (llm=local): JSON roles send their template's schema inside
        # response_format, which it turns into a grammar, so a small model's reply has the schema's shape; a
        # template's ``@@ grammar`` (a judge's verdict tag) goes as its ``grammar`` field. OpenAI's own API takes
        # neither (json_object only). The client puts both into the request's params, so into the cache key.
        self.json_schema = bool(json_schema)
        self.grammar = bool(grammar)
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        if self.timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise LLMError("llm.timeout_s and llm.connect_timeout_s: must be > 0 seconds")
        if int(max_retries) < 0:
            raise LLMError(f"llm.max_retries: must be >= 0, got {max_retries}")
        self.max_retries = int(max_retries)
        self.try_timeout_s = float(try_timeout_s)
        self.call_timeout_s = float(call_timeout_s)
        self.retrying = Retrying(
            max_retries=self.max_retries, backoff_base_s=backoff_base_s, backoff_max_s=backoff_max_s,
            call_timeout_s=self.call_timeout_s, sleep=sleep,
        )  # fmt: skip
        # rpm / tpm per run: ``build_llm`` names the run directory's pacing file, shared by all its processes
        self.limiter = RateLimiter(rpm=rpm, tpm=tpm, max_concurrency=max_concurrency, shared=pacing_file)
        self._client: Any = None
        self._key: str | None = None
        self._lock = threading.Lock()

    def cache_identity(self) -> str:
        return self.name

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                # api_key_env null: a server that takes no key (llama.cpp on 127.0.0.1); the client needs a string
                key = os.environ.get(self.api_key_env) if self.api_key_env else NO_KEY
                if not key:
                    raise LLMError(
                        f"llm.api_key_env: environment variable {self.api_key_env} is not set "
                        f"(backend {self.name} reads its key only from there)"
                    )
                import openai

                self._key = key if self.api_key_env else None  # nothing secret to scrub
                # the client's own Timeout: the HTTP library underneath is the client's business (it changed
                # from httpx to httpx2 within openai 3.x, and an httpx.Timeout is refused there)
                timeout = openai.Timeout(self.timeout_s, connect=self.connect_timeout_s)
                http = openai.DefaultHttpxClient(trust_env=False, follow_redirects=False, timeout=timeout)
                self._client = openai.OpenAI(
                    api_key=key,
                    base_url=self.base_url,
                    timeout=timeout,
                    max_retries=0,
                    http_client=http,
                )
            return self._client

    def complete(self, req: ChatRequest, model: str, params: Mapping[str, Any]) -> BackendReply:
        import openai

        client = self._get_client()
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": [dict(m) for m in req.messages],
            "temperature": params["temperature"],
        }
        if params.get("json_mode"):
            kwargs["response_format"] = {"type": "json_object"}
            if params.get("json_schema"):
                kwargs["response_format"]["schema"] = params["json_schema"]
        if params.get("grammar"):
            kwargs["extra_body"] = {"grammar": params["grammar"]}
        if params.get("max_tokens"):
            kwargs["max_tokens"] = params["max_tokens"]
        if params.get("seed") is not None:
            kwargs["seed"] = params["seed"]
        est_tokens = int(params.get("est_tokens", 0))
        retryable = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError, BadReply)

        def fatal(exc: BaseException, attempt: int) -> BaseException | None:
            if isinstance(
                exc, openai.AuthenticationError | openai.PermissionDeniedError | openai.NotFoundError
            ):
                return LLMError(
                    scrub(f"backend {self.name} at {self.base_url}: {type(exc).__name__}: {exc}", self._key)
                )
            if isinstance(exc, openai.APIStatusError):  # other 4xx: this request is bad, the run is not
                return TransportError(
                    scrub(f"{type(exc).__name__}: {exc}", self._key), retries=attempt, status=exc.status_code
                )
            if isinstance(exc, openai.APIError):  # anything else the client rejects
                return TransportError(scrub(f"{type(exc).__name__}: {exc}", self._key), retries=attempt)
            return None

        return self.retrying.run(
            lambda deadline, attempt: self._try(client, kwargs, deadline, attempt),
            retryable=retryable, what=f"llm: {req.template}", where=self.base_url,
            scrub=lambda text: scrub(text, self._key), retry_after=_retry_after, fatal=fatal,
            pacing=lambda: self.limiter.slot(est_tokens),
        )  # fmt: skip

    def _try(self, client: Any, kwargs: dict[str, Any], deadline: float, attempt: int) -> BackendReply:
        """One HTTP try within ``min(try_timeout_s, time left)`` of wall clock; the reply read and checked here."""
        import openai

        limit = min(self.try_timeout_s, deadline - time.monotonic())
        if limit <= 0:
            raise BadReply(
                f"no time left for a try (llm.call_timeout_s={self.call_timeout_s:g})", retryable=False
            )
        end = time.monotonic() + limit
        timeout = openai.Timeout(min(self.timeout_s, limit), connect=min(self.connect_timeout_s, limit))
        chunks: list[bytes] = []
        try:
            with client.chat.completions.with_streaming_response.create(**kwargs, timeout=timeout) as raw:
                ctype = raw.headers.get("content-type", "")
                for chunk in raw.iter_bytes():
                    chunks.append(chunk)
                    if time.monotonic() > end:
                        raise BadReply(f"no complete reply within {limit:g} s (llm.try_timeout_s)")
        except (BadReply, openai.APIError):
            raise
        except Exception as exc:
            # Reading the body raises the client's HTTP library's own errors, which the client does not wrap and
            # does not export: any other error while the body is read is a failed try (retried, then reported
            # with its type), so this module names no transport package.
            raise BadReply(f"reading the reply failed: {type(exc).__name__}: {exc}") from None
        return _decode(b"".join(chunks), ctype, attempt)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
            self._key = None


class BadReply(RuntimeError):
    """A try that got an HTTP answer but no usable reply (empty, undecodable, too slow); ``retryable``: worth
    asking again (a content filter's refusal is not)."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


def _decode(body: bytes, content_type: str, retries: int) -> BackendReply:
    """The reply text of a 200 body, or ``BadReply`` saying what was wrong with it (shown in the ledger)."""
    if not body.strip():
        raise BadReply("empty reply body")
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        kind = content_type.split(";")[0].strip() or "no content type"
        raise BadReply(f"reply is not JSON ({kind}, {len(body)} bytes: {_sample(body)})") from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices:
        raise BadReply("reply holds no choices")
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else None
    finish = choice.get("finish_reason")
    if not isinstance(text, str) or not text.strip():
        shown = "null" if text is None else repr(text)[:20]
        if finish == "content_filter":
            raise BadReply(
                f"content {shown}, finish_reason content_filter (the provider refused)", retryable=False
            )
        raise BadReply(f"content {shown} (finish_reason {finish})")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadReply("reply text is not valid Unicode (a lone surrogate)") from None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return BackendReply(
        text=text, tokens_in=_count(usage.get("prompt_tokens")), tokens_out=_count(usage.get("completion_tokens")),
        retries=retries,
    )  # fmt: skip


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _sample(body: bytes) -> str:
    """The start of a body for a message, on one line."""
    return " ".join(body[:60].decode("utf-8", "replace").split()) or "?"


def _retry_after(exc: BaseException) -> float | None:
    """The ``Retry-After`` of the response an error carries, in seconds."""
    response = getattr(exc, "response", None)
    return retry_after_s(response.headers.get("retry-after") if response is not None else None)


class ReplayBackend:
    """Answers only from the cache: the wrapper looks the prompt up under ``of``'s identity; reaching this
    backend means the entry is missing, which ``LLM.chat`` reports as a ``ReplayMiss``."""

    name = "replay"
    offline = False  # it replays a real model's answers
    cache_only = True
    makes_network_calls = False

    def __init__(self, model: str, replay_of: str = "openai", can_judge: bool = True) -> None:
        self.model = model
        self.of = replay_of  # llm.replay_of: the backend whose recorded replies are answered
        self.can_judge = can_judge

    def cache_identity(self) -> str:
        return self.of

    def complete(self, req: ChatRequest, model: str, params: Mapping[str, Any]) -> BackendReply:
        raise AssertionError("ReplayBackend.complete is never called: LLM.chat raises ReplayMiss first")

    def close(self) -> None:
        """Nothing to release."""
