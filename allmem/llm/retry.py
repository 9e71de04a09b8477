"""The one bounded retry loop of every HTTP client in allmem: the ``openai`` LLM backend and the memory-service
adapter (``method=http``, ``allmem/remote.py``) both call ``Retrying.run``, so retries, backoff, ``Retry-After``,
the per-call wall-clock limit and the warning per retry behave the same (``allmem/llm/README.md``).

A caller supplies one try (``try_once(deadline, attempt)``) and says which errors are worth another try; a try
that still fails when the retries or the call's time are spent becomes a ``TransportError`` naming what happened,
which ``LLM.chat`` books as a failed call (the ledger, the breaker, the question recorded as failed).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TypeVar

from allmem.llm.base import TransportError

log = logging.getLogger("allmem.llm")
T = TypeVar("T")


def retry_after_s(value: str | None) -> float | None:
    """A server's ``Retry-After`` in seconds: either delay-seconds or an HTTP-date (RFC 9110, 10.2.3)."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def describe(exc: BaseException) -> str:
    """``APIConnectionError: Connection error. ([Errno 111] Connection refused)``: the error's words and the cause
    underneath, which says what actually happened (refused, timed out, name not resolved), on one line (it goes
    into warnings, the ledger and the run's failure summary)."""
    text = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if cause is not None and str(cause) and str(cause) not in text:
        text += f" ({type(cause).__name__}: {cause})"
    return " ".join(text.split())


class Retrying:
    """Bounded retries with exponential backoff and full jitter, at least a server's ``Retry-After``; every try
    and wait inside ``call_timeout_s`` of wall clock (pacing waits excluded)."""

    def __init__(
        self,
        *,
        max_retries: int,
        backoff_base_s: float,
        backoff_max_s: float,
        call_timeout_s: float,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.max_retries = int(max_retries)
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.call_timeout_s = float(call_timeout_s)
        self.sleep = sleep
        self._rng = random.Random()

    def backoff_s(self, attempt: int, retry_after: float | None) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2^attempt)], but at least a server's Retry-After."""
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2**attempt))
        wait = self._rng.uniform(0.0, ceiling)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.backoff_max_s))
        return wait

    def run(
        self,
        try_once: Callable[[float, int], T],
        *,
        retryable: tuple[type[BaseException], ...],
        what: str,
        where: str,
        scrub: Callable[[str], str] = lambda s: s,
        retry_after: Callable[[BaseException], float | None] = lambda exc: None,
        fatal: Callable[[BaseException, int], BaseException | None] = lambda exc, attempt: None,
        pacing: Callable[[], AbstractContextManager[object]] = nullcontext,
    ) -> T:
        """``try_once(deadline, attempt)`` until it returns. An error in ``retryable`` (unless it says
        ``retryable = False``) is tried again after a backoff while retries and time are left, then raised as a
        ``TransportError``; any other error goes to ``fatal(exc, attempt)``, whose returned error is raised in
        its place (None: raised as it is). ``pacing()`` wraps each try; its wait does not count as the call's
        time. ``what`` names the call in warnings (a template, a service route), ``where`` the endpoint."""
        deadline = time.monotonic() + self.call_timeout_s
        attempt = 0
        while True:
            try:
                queued = time.monotonic()
                with pacing():
                    deadline += time.monotonic() - queued  # pacing is not the endpoint's time
                    return try_once(deadline, attempt)
            except retryable as exc:
                status = getattr(exc, "status_code", None)
                said = scrub(describe(exc))
                left = deadline - time.monotonic()
                if attempt >= self.max_retries or not getattr(exc, "retryable", True) or left <= 0:
                    why = (
                        f"after {attempt} retries"
                        if left > 0
                        else f"call limit {self.call_timeout_s:g} s reached"
                    )
                    raise TransportError(f"{said} ({why})", retries=attempt, status=status) from None
                wait = min(self.backoff_s(attempt, retry_after(exc)), left)
                log.warning(
                    "%s call to %s failed: %s; retry %d of %d in %.1f s",
                    what, where, said, attempt + 1, self.max_retries, wait,
                )  # fmt: skip
                self.sleep(wait)
                attempt += 1
            except Exception as exc:
                replaced = fatal(exc, attempt)
                if replaced is None:
                    raise
                raise replaced from None
