"""Client-side throttling: bounded concurrency plus requests-per-minute and tokens-per-minute windows.

Why client-side: providers answer bursts with 429s, and every 429 costs a backoff sleep; pacing requests
below the account's limits keeps a long run at full speed. Token counts are estimates made before the call
(prompt tokens plus the expected reply), which is what providers meter against too.

The limits are per run, not per process: given a ``shared`` file (the run directory's ``files.PACING``, which
``build_llm`` names), the windows' events live in that SQLite file, each booking in one ``BEGIN IMMEDIATE``
transaction, so every process of the run (``run.workers``) draws on one rpm and one tpm. Their times are wall-clock
seconds (``time.time``), the one clock all processes share. Concurrency stays per process. SQLite's locking needs
a local file system: on a cluster, shards on different nodes each pace themselves.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("allmem.llm")
#: Waits longer than this are announced (one line): a run paused by its own tpm/rpm pacing must not look hung.
NOTICE_AFTER_S = 5.0


class RateLimiter:
    """Sliding 60-second windows; ``rpm``/``tpm`` of 0 or None mean unlimited. With ``shared`` (a file path) the
    windows are those of every process using that file (the clock then defaults to wall-clock time)."""

    def __init__(
        self,
        rpm: int | None = None,
        tpm: int | None = None,
        max_concurrency: int = 4,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        window_s: float = 60.0,
        shared: str | Path | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.rpm = rpm or 0
        self.tpm = tpm or 0
        self.window_s = window_s
        self._sleep = sleep
        self._sem = threading.BoundedSemaphore(max_concurrency)
        self._lock = threading.Lock()
        self._events: deque[tuple[float, int]] = deque()  # (time, tokens)
        paced = bool(self.rpm or self.tpm)
        self.shared = SharedWindow(Path(shared), window_s) if shared is not None and paced else None
        self._clock = clock or (time.time if self.shared is not None else time.monotonic)

    def _wait_s(self, events: Sequence[tuple[float, int]], now: float, tokens: int) -> float:
        """Seconds until a request of ``tokens`` fits, given the window's ``events`` (oldest first)."""
        wait = 0.0
        if self.rpm and len(events) >= self.rpm:
            wait = max(wait, events[len(events) - self.rpm][0] + self.window_s - now)
        if self.tpm:
            used = sum(t for _, t in events)
            if used + tokens > self.tpm and events:
                # wait until enough old tokens leave the window (a single call larger than tpm goes alone)
                need, freed = used + tokens - self.tpm, 0
                for ts, t in events:
                    freed += t
                    if freed >= need:
                        wait = max(wait, ts + self.window_s - now)
                        break
        return wait

    def _book(self, tokens: int) -> float:
        """Book the request if it fits now (returns 0), else return how long to wait."""
        with self._lock:
            now = self._clock()
            if self.shared is not None:
                return self.shared.book(now, tokens, self._wait_s)
            while self._events and now - self._events[0][0] >= self.window_s:
                self._events.popleft()
            wait = self._wait_s(self._events, now, tokens)
            if wait <= 0:
                self._events.append((now, tokens))
            return wait

    def acquire(self, tokens: int = 0) -> None:
        """Block until one more request of ``tokens`` fits both windows, then book it."""
        if not (self.rpm or self.tpm):
            return
        while True:
            wait = self._book(tokens)
            if wait <= 0:
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


class SharedWindow:
    """The pacing events of every process of a run, in one SQLite file (made on first use, beside the run's files).

    A booking is one ``BEGIN IMMEDIATE`` transaction (drop events older than the window, read the rest, add the
    request if it fits), so two processes never both take the last slot. A file that is not this database is
    moved aside and started afresh (pacing history is not a result).
    """

    def __init__(self, path: Path, window_s: float) -> None:
        self.path, self.window_s = path, window_s
        self._conn: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                str(self.path), timeout=60.0, isolation_level=None, check_same_thread=False
            )
            try:
                conn.execute("CREATE TABLE IF NOT EXISTS events (t REAL NOT NULL, tokens INTEGER NOT NULL)")
            except sqlite3.DatabaseError as exc:
                conn.close()
                if isinstance(exc, sqlite3.OperationalError):  # busy or locked is not damage
                    raise
                from allmem.cache_store import set_aside

                set_aside(self.path, exc, cache="llm pacing file", then="pacing starts afresh")
                return self._connect()
            self._conn = conn
        return self._conn

    def book(
        self, now: float, tokens: int, wait_s: Callable[[Sequence[tuple[float, int]], float, int], float]
    ) -> float:
        """Book a request of ``tokens`` at ``now`` if ``wait_s`` over the window's events says it fits (returns
        0), else return the wait. The caller holds its own thread lock."""
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("DELETE FROM events WHERE t <= ?", (now - self.window_s,))
            events = conn.execute("SELECT t, tokens FROM events ORDER BY t").fetchall()
            wait = wait_s(events, now, tokens)
            if wait <= 0:
                conn.execute("INSERT INTO events VALUES (?, ?)", (now, int(tokens)))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return wait
