"""Client-side throttling: bounded concurrency plus requests-per-minute and tokens-per-minute windows.

Why client-side: providers answer bursts with 429s, and every 429 costs a backoff sleep; pacing requests
below the account's limits keeps a long run at full speed. Token counts are estimates made before the call
(prompt tokens plus the expected reply), which is what providers meter against too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("allmem.llm")
#: Waits longer than this are announced (one line): a run paused by its own tpm/rpm pacing must not look hung.
NOTICE_AFTER_S = 5.0


class RateLimiter:
    """Sliding 60-second windows; ``rpm``/``tpm`` of 0 or None mean unlimited."""

    def __init__(
        self,
        rpm: int | None = None,
        tpm: int | None = None,
        max_concurrency: int = 4,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        window_s: float = 60.0,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.rpm = rpm or 0
        self.tpm = tpm or 0
        self.window_s = window_s
        self._clock = clock
        self._sleep = sleep
        self._sem = threading.BoundedSemaphore(max_concurrency)
        self._lock = threading.Lock()
        self._events: deque[tuple[float, int]] = deque()  # (time, tokens)

    def _wait_s(self, now: float, tokens: int) -> float:
        while self._events and now - self._events[0][0] >= self.window_s:
            self._events.popleft()
        wait = 0.0
        if self.rpm and len(self._events) >= self.rpm:
            wait = max(wait, self._events[len(self._events) - self.rpm][0] + self.window_s - now)
        if self.tpm:
            used = sum(t for _, t in self._events)
            if used + tokens > self.tpm and self._events:
                # wait until enough old tokens leave the window (a single call larger than tpm goes alone)
                need, freed = used + tokens - self.tpm, 0
                for ts, t in self._events:
                    freed += t
                    if freed >= need:
                        wait = max(wait, ts + self.window_s - now)
                        break
        return wait

    def acquire(self, tokens: int = 0) -> None:
        """Block until one more request of ``tokens`` fits both windows, then book it."""
        while True:
            with self._lock:
                now = self._clock()
                wait = self._wait_s(now, tokens)
                if wait <= 0:
                    self._events.append((now, tokens))
                    return
            if wait > NOTICE_AFTER_S:
                log.info(
                    "llm: pacing to llm.rpm=%s / llm.tpm=%s: waiting %.0f s before the next call",
                    self.rpm or None, self.tpm or None, wait,
                )  # fmt: skip
            self._sleep(min(wait, self.window_s))

    @contextmanager
    def slot(self, tokens: int = 0) -> Iterator[None]:
        """One concurrent request slot, paced by the windows."""
        with self._sem:
            self.acquire(tokens)
            yield
