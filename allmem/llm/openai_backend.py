"""The ``openai`` backend: the official client against any OpenAI-compatible ``base_url``.

Why our own retry loop (the client's ``max_retries`` is set to 0): the retry policy is part of the method's
cost accounting and must be bounded, observable (retries are counted in the ledger) and testable; it backs off
exponentially with full jitter on 429, 5xx, timeouts and connection errors, honouring ``Retry-After`` up to
the cap, and logs one warning per retry (a slow or dead endpoint is never silent). Connecting and reading have
separate timeouts: a dead endpoint fails within ``connect_timeout_s``, a slow model gets ``timeout_s`` to answer.
The HTTP client ignores proxy environment variables and redirects, so requests go only to the
configured base URL. The API key is read from the environment variable named in the config, kept only in the
client object, and scrubbed from every error message this module raises.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from allmem.llm.base import BackendReply, ChatRequest, LLMError, TransportError
from allmem.llm.limiter import RateLimiter

log = logging.getLogger("allmem.llm")


def scrub(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` masked."""
    return text.replace(secret, "***") if secret else text


class OpenAIBackend:
    """Chat completions over HTTP; one client shared by threads (the client is thread-safe)."""

    name = "openai"
    can_judge = True
    makes_network_calls = True

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        max_retries: int = 4,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        max_concurrency: int = 4,
        rpm: int | None = None,
        tpm: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not base_url:
            raise LLMError("llm.base_url: required for backend openai (e.g. https://api.openai.com/v1)")
        if not api_key_env:
            raise LLMError(
                "llm.api_key_env: required for backend openai (the NAME of an environment variable)"
            )
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        if self.timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise LLMError("llm.timeout_s and llm.connect_timeout_s: must be > 0 seconds")
        if int(max_retries) < 0:
            raise LLMError(f"llm.max_retries: must be >= 0, got {max_retries}")
        self.max_retries = int(max_retries)
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.limiter = RateLimiter(rpm=rpm, tpm=tpm, max_concurrency=max_concurrency)
        self._sleep = sleep
        self._client: Any = None
        self._key: str | None = None
        self._lock = threading.Lock()
        self._rng = random.Random()

    def cache_identity(self) -> str:
        return self.name

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                key = os.environ.get(self.api_key_env)
                if not key:
                    raise LLMError(
                        f"llm.api_key_env: environment variable {self.api_key_env} is not set "
                        "(backend openai reads its key only from there)"
                    )
                import httpx
                import openai

                self._key = key
                timeout = httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s)
                http = openai.DefaultHttpxClient(trust_env=False, follow_redirects=False, timeout=timeout)
                self._client = openai.OpenAI(
                    api_key=key,
                    base_url=self.base_url,
                    timeout=timeout,
                    max_retries=0,
                    http_client=http,
                )
            return self._client

    def _backoff_s(self, attempt: int, retry_after: float | None) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2^attempt)], but at least a server's Retry-After."""
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2**attempt))
        wait = self._rng.uniform(0.0, ceiling)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.backoff_max_s))
        return wait

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
        if params.get("max_tokens"):
            kwargs["max_tokens"] = params["max_tokens"]
        if params.get("seed") is not None:
            kwargs["seed"] = params["seed"]
        est_tokens = int(params.get("est_tokens", 0))
        retryable = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)
        attempt = 0
        while True:
            try:
                with self.limiter.slot(est_tokens):
                    resp = client.chat.completions.create(**kwargs)
                break
            except retryable as exc:
                status = getattr(exc, "status_code", None)
                what = scrub(_describe(exc), self._key)
                if attempt >= self.max_retries:
                    raise TransportError(
                        f"{what} (after {attempt} retries)", retries=attempt, status=status
                    ) from None
                wait = self._backoff_s(attempt, _retry_after(exc))
                log.warning(
                    "llm: %s call to %s failed: %s; retry %d of %d in %.1f s",
                    req.template, self.base_url, what, attempt + 1, self.max_retries, wait,
                )  # fmt: skip
                self._sleep(wait)
                attempt += 1
            except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as exc:
                raise LLMError(
                    scrub(f"backend openai at {self.base_url}: {type(exc).__name__}: {exc}", self._key)
                ) from None
            except openai.APIStatusError as exc:  # other 4xx: this request is bad, the run is not
                raise TransportError(
                    scrub(f"{type(exc).__name__}: {exc}", self._key), retries=attempt, status=exc.status_code
                ) from None
            except openai.APIError as exc:  # malformed response body and the like
                raise TransportError(
                    scrub(f"{type(exc).__name__}: {exc}", self._key), retries=attempt
                ) from None
        choice = resp.choices[0] if resp.choices else None
        text = (choice.message.content if choice is not None else None) or ""
        usage = getattr(resp, "usage", None)
        return BackendReply(
            text=text,
            tokens_in=getattr(usage, "prompt_tokens", None) if usage else None,
            tokens_out=getattr(usage, "completion_tokens", None) if usage else None,
            retries=attempt,
        )

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
            self._key = None


def _describe(exc: Exception) -> str:
    """``APIConnectionError: Connection error. ([Errno 111] Connection refused)``: the client's words and the
    cause underneath, which says what actually happened (refused, timed out, name not resolved)."""
    text = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text += f" ({type(cause).__name__}: {cause})"
    return text


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class ReplayBackend:
    """Answers only from the cache: the wrapper looks the prompt up under ``of``'s identity; reaching this
    backend means the entry is missing, which ``LLM.chat`` reports as a ``ReplayMiss``."""

    name = "replay"
    makes_network_calls = False

    def __init__(self, model: str, of: str = "openai", can_judge: bool = True) -> None:
        self.model = model
        self.of = of
        self.can_judge = can_judge

    def cache_identity(self) -> str:
        return self.of

    def complete(self, req: ChatRequest, model: str, params: Mapping[str, Any]) -> BackendReply:
        raise AssertionError("ReplayBackend.complete is never called: LLM.chat raises ReplayMiss first")

    def close(self) -> None:
        """Nothing to release."""
