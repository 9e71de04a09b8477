"""``LLM``: the one wrapper every prompt goes through, whatever the backend.

For each request it computes the cache key (also the ledger's prompt hash), serves a hit or calls the backend,
parses the reply against the template's schema into data or a typed ``ParseFailure``, and books the call in the
ledger. A transport failure after the backend's retries is a failed ``ChatResult``, never an exception, until
``breaker_after`` consecutive ones open the circuit (``CircuitOpen``); configuration errors and replay misses
raise. Failed calls, the breaker and dry runs: ``allmem/llm/README.md``.

A JSON role's reply that does not parse or match its schema is asked again up to ``llm.repair_retries`` times
(``repair``: the reply shown back, then the one-line problem); every try is booked, the repairs with ``repair``
and ``repair_of`` (the prompt hash of the reply they replace), so a run's per-role invalid and unusable counts
come from calls.jsonl alone (``allmem.llm.ledger.roles_of``). ``llm.context_window``: a prompt whose estimate
and reply cap do not fit fails here with a clear error, before any request; no server truncates it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from allmem.errors import LLMError
from allmem.llm.base import BackendReply, ChatRequest, ChatResult, ReplayMiss, TransportError
from allmem.llm.cache import CachedReply, ResponseCache, cache_key, usable
from allmem.llm.ledger import Ledger
from allmem.llm.prompts import load_template, parse_reply
from allmem.tokens import count_tokens
from allmem.types import CallRecord

REPAIR_TEMPLATE = "repair"  # prompts/repair.txt: the follow-up turn after an unusable reply
REPAIR_ECHO_CHARS = (
    2000  # how much of the unusable reply the repair shows back (an over-long one is cut here)
)
REPAIR_PROBLEM_CHARS = 200


def pool_size(llm: Any, workers: int = 1) -> int:
    """Threads for a pool whose tasks call ``llm``: ``workers``, raised to the client's ``max_concurrency`` so that
    many calls can be in flight (the backend caps what is in flight at ``llm.max_concurrency`` per process)."""
    return max(1, int(workers), int(getattr(llm, "max_concurrency", 1) or 1))


class CircuitOpen(LLMError):
    """``breaker_after`` consecutive calls failed after their retries: the endpoint is down, stop the run."""


class Backend(Protocol):
    """What the harness asks of a backend. Callers gate on its capabilities, never on its ``name``:
    ``offline`` (answers come from the offline roles, tokens are counted locally: offline numbers),
    ``can_judge`` (judge prompts get a model's verdict), ``cache_only`` (answers only from the response cache),
    ``makes_network_calls``."""

    name: str
    model: str
    can_judge: bool
    offline: bool
    cache_only: bool
    makes_network_calls: bool

    def cache_identity(self) -> str: ...

    def complete(self, req: ChatRequest, model: str, params: dict[str, Any]) -> BackendReply: ...

    def close(self) -> None: ...


class LLM:
    """Cache + ledger + parsing around one backend. Thread-safe; ``chat_many`` runs requests concurrently."""

    def __init__(
        self,
        backend: Backend,
        *,
        cache: ResponseCache | None = None,
        ledger: Ledger | None = None,
        temperature: float = 0.0,
        judge_model: str | None = None,
        judge_temperature: float = 0.0,
        judge_enabled: bool = True,
        judge_votes: int = 1,
        max_concurrency: int = 4,
        dry_run: bool = False,
        info: dict[str, Any] | None = None,
        breaker_after: int = 0,
        max_tokens: int | None = None,
        context_window: int | None = None,
        repair_retries: int = 0,
    ) -> None:
        self.backend = backend
        self.cache = cache if cache is not None else ResponseCache(":memory:", enabled=False)
        self.ledger = ledger if ledger is not None else Ledger()
        self.temperature = float(temperature)
        self.judge_model = judge_model or backend.model
        self.judge_temperature = float(judge_temperature)
        self.judge_enabled = bool(judge_enabled)
        self.judge_votes = int(judge_votes)
        if self.judge_votes < 1:
            raise LLMError(f"llm.judge.n_votes: must be >= 1, got {judge_votes}")
        self.max_concurrency = max(1, int(max_concurrency))
        self.dry_run = bool(dry_run)
        self._info = dict(info or {})
        if breaker_after < 0:
            raise LLMError(f"llm.breaker_after: must be >= 0 (0 = never stop), got {breaker_after}")
        self.breaker_after = int(breaker_after)
        for name, value in (("max_tokens", max_tokens), ("context_window", context_window)):
            if value is not None and (isinstance(value, bool) or int(value) < 1):
                raise LLMError(f"llm.{name}: must be an integer >= 1 (or null), got {value!r}")
        if int(repair_retries) < 0:
            raise LLMError(f"llm.repair_retries: must be >= 0, got {repair_retries}")
        self.max_tokens = (
            int(max_tokens) if max_tokens is not None else None
        )  # a reply's cap when the role sets none
        self.context_window = int(context_window) if context_window is not None else None
        self.repair_retries = int(repair_retries)
        self._breaker_lock = threading.Lock()
        self._consecutive_failures = 0
        self._open: str | None = None  # the breaker's message once it has opened
        if backend.cache_only and not self.cache.enabled:
            raise LLMError("llm.cache.enabled: the replay backend answers only from the cache; enable it")

    # ------------------------------------------------------------------ properties

    @property
    def backend_name(self) -> str:
        return self.backend.name

    @property
    def model(self) -> str:
        return self.backend.model

    @property
    def offline(self) -> bool:
        """Whether the answers come from the offline roles: the offline backend, or a dry run (no model called)."""
        return bool(self.backend.offline) or self.dry_run

    @property
    def can_judge(self) -> bool:
        """Whether judge prompts can be answered here (never offline, never in a dry run)."""
        return bool(self.backend.can_judge) and not self.dry_run

    def describe(self) -> dict[str, Any]:
        """Safe description for manifests: backend, models, base URL, the key's variable NAME (never its value)."""
        return {
            "backend": self.backend.name,
            "model": self.model,
            "judge_model": self.judge_model,
            "judge": {"enabled": self.judge_enabled, "n_votes": self.judge_votes},
            "temperature": self.temperature,
            "dry_run": self.dry_run,
            "cache": {
                "enabled": self.cache.enabled,
                "path": str(self.cache.path) if self.cache.enabled else None,
            },
        } | self._info

    # ------------------------------------------------------------------ calls

    def params_for(self, req: ChatRequest) -> tuple[str, dict[str, Any]]:
        """The model and every generation parameter of ``req`` (all of it goes into the cache key)."""
        judge = req.phase == "judge"
        model = req.model or (self.judge_model if judge else self.model)
        params: dict[str, Any] = {
            "temperature": float(req.temperature)
            if req.temperature is not None
            else (self.judge_temperature if judge else self.temperature),
            "json_mode": req.json_schema is not None,
            "max_tokens": req.max_tokens or self.max_tokens,
        }
        # decoding constraints the backend applies are part of the request, so of the cache key; a backend that
        # takes none gets none, and its keys are as before (``llm.json_schema``, ``llm.grammar``: llm=local)
        if req.json_schema is not None and getattr(self.backend, "json_schema", False):
            params["json_schema"] = dict(req.json_schema)
        if req.grammar and getattr(self.backend, "grammar", False):
            params["grammar"] = req.grammar
        if req.sample:
            params["seed"] = req.sample
        return model, params

    def chat(self, req: ChatRequest) -> ChatResult:
        """The reply to ``req``; a JSON role's unusable reply is repaired up to ``repair_retries`` times."""
        res = self._chat_once(req)
        while self.needs_repair(req, res):
            req, res = self._repair(req, res, res.parse_error.message)
        return res

    def needs_repair(self, req: ChatRequest, res: ChatResult) -> bool:
        """Whether ``res`` is a JSON reply that did not parse and may be asked again (never offline: the offline
        roles are code, and a repair would only repeat them)."""
        return (
            res.parse_error is not None and res.error is None and not self.offline
            and req.repair < self.repair_retries
        )  # fmt: skip

    def repair(
        self, req: ChatRequest, res: ChatResult, problem: str
    ) -> tuple[ChatRequest, ChatResult] | None:
        """One repair turn after ``res``, an unusable reply to ``req`` (``problem``: why, in one line): the repair
        request and its result, or None when no repair is left (``repair_retries``) or possible (offline, a
        failed call). Callers with their own reading of a reply (the judge's verdict) use this; JSON roles get it
        inside ``chat``."""
        if res.error is not None or self.offline or req.repair >= self.repair_retries:
            return None
        return self._repair(req, res, problem)

    def _repair(self, req: ChatRequest, res: ChatResult, problem: str) -> tuple[ChatRequest, ChatResult]:
        tpl = load_template(REPAIR_TEMPLATE)
        follow = tpl.render({"problem": " ".join(problem.split())[:REPAIR_PROBLEM_CHARS]})
        fixed = dataclasses.replace(
            req,
            messages=(*req.messages, {"role": "assistant", "content": res.text[:REPAIR_ECHO_CHARS]}, *follow),
            template_version=f"{req.template_version}+{tpl.name}{tpl.version}",
            repair=req.repair + 1,
        )
        return fixed, self._chat_once(fixed, repair_of=res.prompt_hash)

    def _chat_once(self, req: ChatRequest, repair_of: str | None = None) -> ChatResult:
        model, params = self.params_for(req)
        extra = {"repair": req.repair, "repair_of": repair_of} if req.repair else {}
        key = cache_key(
            backend=self.backend.cache_identity(),
            model=model,
            messages=req.messages,
            params=params,
            template=req.template,
            template_version=req.template_version,
        )
        if self.dry_run:
            return self._dry_run(req, model, key)
        if self._open is not None:
            raise CircuitOpen(self._open)
        t0 = time.perf_counter()
        hit = self.cache.get(key, req.phase)
        if hit is not None:
            return self._finish(
                req, model, key, hit.text, hit.tokens_in, hit.tokens_out, t0, cached=True, **extra
            )
        if self.backend.cache_only:
            raise ReplayMiss(key, req.phase, req.template)
        est_in = count_tokens(req.prompt_text)
        window = self.context_window
        if window is not None and est_in + (params["max_tokens"] or 0) > window:
            reason = (
                f"prompt of about {est_in} tokens ({req.template}) plus the reply's cap of {params['max_tokens']} "
                f"exceeds llm.context_window={window}: not sent (the server would refuse or cut it)"
            )
            return self._failed(req, model, key, est_in, t0, TransportError(reason), breaker=False, **extra)
        try:
            reply = self.backend.complete(
                req, model, params | {"est_tokens": est_in + (req.max_tokens or load_est(req.template))}
            )
            if self.backend.makes_network_calls and not usable(reply.text):  # backstop: no reply is no answer
                raise TransportError("empty reply", retries=reply.retries)
        except TransportError as exc:
            return self._failed(req, model, key, est_in, t0, exc, **extra)
        with self._breaker_lock:
            self._consecutive_failures = 0
        estimated = reply.tokens_in is None or reply.tokens_out is None
        tokens_in = reply.tokens_in if reply.tokens_in is not None else est_in
        tokens_out = reply.tokens_out if reply.tokens_out is not None else count_tokens(reply.text)
        self.cache.put(
            key,
            phase=req.phase,
            template=req.template,
            backend=self.backend.cache_identity(),
            model=model,
            reply=CachedReply(reply.text, tokens_in, tokens_out),
        )
        return self._finish(
            req, model, key, reply.text, tokens_in, tokens_out, t0, cached=False, estimated=estimated,
            retries=reply.retries, **extra,
        )  # fmt: skip

    def _failed(
        self, req: ChatRequest, model: str, key: str, est_in: int, t0: float, exc: TransportError,
        breaker: bool = True, **extra: Any,
    ) -> ChatResult:  # fmt: skip
        """A call that got no usable reply after its retries: booked, counted by the breaker (unless it was never
        sent: ``breaker`` False), never cached."""
        latency = (time.perf_counter() - t0) * 1000
        self._book(
            req, model, key, est_in, 0, latency, cached=False, ok=False, estimated=True, error=str(exc),
            retries=exc.retries, **extra,
        )  # fmt: skip
        if breaker:
            self._count_failure(str(exc))
        return self._result(
            req, model, key, "", est_in, 0, latency, cached=False, data=None, failure=None, estimated=True,
            error=f"transport: {exc}",
        )  # fmt: skip

    def book_failure(self, phase: str, what: str, error: str, latency_ms: float, retries: int) -> None:
        """A call outside this client that failed after ``allmem.llm.retry``'s retries (a memory service's,
        ``method=http``): booked like a failed LLM call, so the same rules follow (the question or dialogue it
        served recorded as failed, the breaker counting it)."""
        rec = CallRecord(
            phase=phase, backend="http", model=what, tokens_in=0, tokens_out=0, latency_ms=round(latency_ms, 3),
            cached=False, prompt_hash="", ok=False, error=error,
        )  # fmt: skip
        self.ledger.record(rec, template=what, template_version="", estimated=True, retries=retries)
        self._count_failure(error)

    def note_success(self) -> None:
        """A call outside this client succeeded: the breaker counts consecutive failures only."""
        with self._breaker_lock:
            self._consecutive_failures = 0

    def endpoint(self) -> str:
        """Where calls go, for messages: the base URL, else the backend's name."""
        return str(self._info.get("base_url") or self.backend.name)

    def _count_failure(self, error: str) -> None:
        """One more consecutive transport failure; open the breaker at ``breaker_after``."""
        with self._breaker_lock:
            self._consecutive_failures += 1
            n = self._consecutive_failures
            if self.breaker_after and n >= self.breaker_after and self._open is None:
                self._open = (
                    f"llm: {n} consecutive calls to {self.endpoint()} failed after their retries "
                    f"(last: {error}); stopped early (llm.breaker_after={self.breaker_after})"
                )
            message = self._open
        if message is not None:
            raise CircuitOpen(message)

    def chat_many(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Results in request order, computed with up to ``max_concurrency`` threads. Each runs in a copy of the
        caller's context, so the calls are booked under the caller's ``Ledger.local_scope``."""
        if len(requests) <= 1 or self.max_concurrency == 1:
            return [self.chat(r) for r in requests]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(requests))) as pool:
            futures = [pool.submit(contextvars.copy_context().run, self.chat, r) for r in requests]
            return [f.result() for f in futures]

    def _finish(
        self,
        req: ChatRequest,
        model: str,
        key: str,
        text: str,
        tokens_in: int,
        tokens_out: int,
        t0: float,
        *,
        cached: bool,
        estimated: bool = False,
        retries: int = 0,
        **extra: Any,
    ) -> ChatResult:
        data, failure = parse_reply(text, req.json_schema) if req.json_schema is not None else (None, None)
        latency = (time.perf_counter() - t0) * 1000
        estimated = estimated or bool(self.backend.offline)
        self._book(
            req, model, key, tokens_in, tokens_out, latency, cached=cached, ok=failure is None,
            estimated=estimated, retries=retries, parse_error=failure.kind if failure else None, **extra,
        )  # fmt: skip
        return self._result(
            req, model, key, text, tokens_in, tokens_out, latency, cached=cached, data=data, failure=failure,
            estimated=estimated,
        )  # fmt: skip

    def _result(
        self, req: ChatRequest, model: str, key: str, text: str, tokens_in: int, tokens_out: int, latency: float,
        *, cached: bool, data: Any, failure: Any, estimated: bool, error: str | None = None,
    ) -> ChatResult:  # fmt: skip
        """The one place a ChatResult is assembled (live, cached and dry-run calls alike)."""
        return ChatResult(
            text=text,
            phase=req.phase,
            template=req.template,
            backend=self.backend.name,
            model=model,
            prompt_hash=key,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            latency_ms=latency,
            cached=cached,
            data=data,
            parse_error=failure,
            error=error,
            estimated=estimated,
        )

    def _dry_run(self, req: ChatRequest, model: str, key: str) -> ChatResult:
        """No model called: the offline role's reply where there is one; booked under the real model with the
        tokens of the prompt and of that reply (else the template's ``est_tokens_out``), flagged ``estimated``."""
        t0 = time.perf_counter()
        tokens_in = count_tokens(req.prompt_text)
        text, data, failure, error = "", None, None, "dry run: no model was called"
        from allmem.llm.offline import has_offline_reply, offline_reply

        if has_offline_reply(req):
            text = offline_reply(req)
            tokens_out = count_tokens(text)
            if req.json_schema is not None:
                data, failure = parse_reply(text, req.json_schema)
            error = None
        else:
            tokens_out = load_est(req.template)
        latency = (time.perf_counter() - t0) * 1000
        self._book(
            req,
            model,
            key,
            tokens_in,
            tokens_out,
            latency,
            cached=False,
            ok=True,
            estimated=True,
            dry_run=True,
        )
        return self._result(
            req, model, key, text, tokens_in, tokens_out, latency, cached=False, data=data, failure=failure,
            estimated=True, error=error,
        )  # fmt: skip

    def _book(
        self,
        req: ChatRequest,
        model: str,
        key: str,
        tokens_in: int,
        tokens_out: int,
        latency_ms: float,
        *,
        cached: bool,
        ok: bool,
        error: str | None = None,
        **extra: Any,
    ) -> None:
        rec = CallRecord(
            phase=req.phase,
            backend=self.backend.name,
            model=model,
            tokens_in=int(tokens_in),
            tokens_out=int(tokens_out),
            latency_ms=round(latency_ms, 3),
            cached=cached,
            prompt_hash=key,
            ok=ok,
            error=error,
        )
        self.ledger.record(rec, template=req.template, template_version=req.template_version, **extra)

    # ------------------------------------------------------------------ reporting

    def totals(self) -> dict[str, Any]:
        """Ledger totals per phase plus cache hits/misses per phase: what metrics.json stores under ``llm``."""
        out = self.ledger.totals()
        for phase, counts in self.cache.stats().items():
            out.setdefault(phase, {}).update({"cache_" + k: v for k, v in counts.items()})
        return out

    def close(self) -> None:
        self.backend.close()
        self.cache.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_est(template: str) -> int:
    """The template's typical reply length (dry-run estimates, rate-limiter bookings)."""
    try:
        return load_template(template).est_tokens_out
    except FileNotFoundError:
        return 32
