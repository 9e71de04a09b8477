"""The response cache: SQLite in WAL mode, shared safely by threads and processes.

Key = sha256 over the canonical JSON of (backend, model, messages, every generation parameter, template name and
version). Anything that could change a reply is in the key, so a stale hit needs a deliberate collision; the
API key and the base URL are not (the key is a secret; the URL does not change what a given model says).
One connection per thread: sqlite3 connections must not be shared across threads; WAL lets readers and one
writer in other processes proceed without blocking each other, and ``INSERT OR IGNORE`` makes concurrent
writes of the same key harmless.

A file that SQLite cannot read (garbage, truncated, a table of another shape) stops the run with ``LLMError``
naming the file and saying how to rebuild it (delete it; its replies are asked again, or recorded again for
replay); the cache never silently starts over, since under ``llm=replay`` it is the only source of replies. A
stored reply that is empty or not valid Unicode (written by an older version that cached empty answers) is no
answer: ``get`` drops it and reports a miss, so it is never served as a success.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from allmem.errors import LLMError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    phase TEXT NOT NULL,
    template TEXT NOT NULL,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    created REAL NOT NULL
)
"""


def cache_key(
    *,
    backend: str,
    model: str,
    messages: Sequence[Mapping[str, str]],
    params: Mapping[str, Any],
    template: str,
    template_version: str,
) -> str:
    """sha256 hex of the canonical JSON of everything that determines a reply (also the ledger's prompt hash)."""
    blob = json.dumps(
        {
            "backend": backend,
            "model": model,
            "messages": [dict(m) for m in messages],
            "params": dict(params),
            "template": template,
            "template_version": template_version,
        },
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedReply:
    text: str
    tokens_in: int
    tokens_out: int


def usable(text: Any) -> bool:
    """Whether a reply text can be served: a non-blank string that is valid Unicode (no lone surrogate)."""
    if not isinstance(text, str) or not text.strip():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unreadable(path: Path, exc: BaseException) -> LLMError:
    """The one message for a response cache SQLite cannot use (preflight and the cache itself raise it)."""
    if "locked" in str(exc):  # busy beyond the timeout: another process holds it, the file is fine
        return LLMError(
            f"llm.cache: {path} stayed locked by another process ({exc}); run again when it is free"
        )
    return LLMError(
        f"llm.cache: {path} is not a readable response cache ({type(exc).__name__}: {exc}); delete it to rebuild "
        "it (llm=openai asks its prompts again; llm=replay needs it recorded again with llm=openai)"
    )


class ResponseCache:
    """Get/put by key, with hit and miss counts per phase. ``enabled=False`` bypasses it entirely."""

    def __init__(self, path: str | Path, enabled: bool = True, timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        self.enabled = enabled
        self.timeout_s = timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: list[sqlite3.Connection] = []
        self._counts: dict[str, dict[str, int]] = defaultdict(lambda: {"hits": 0, "misses": 0})
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn()  # fail early on an unusable path

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(str(self.path), timeout=self.timeout_s, check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
                conn.execute(_SCHEMA)
                conn.execute("SELECT key, text, tokens_in, tokens_out FROM responses LIMIT 1").fetchall()
                conn.commit()
            except sqlite3.Error as exc:
                raise unreadable(self.path, exc) from None
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def get(self, key: str, phase: str) -> CachedReply | None:
        if not self.enabled:
            return None
        conn = self._conn()
        try:
            row = conn.execute(
                "SELECT text, tokens_in, tokens_out FROM responses WHERE key=?", (key,)
            ).fetchone()
            if row is not None and not usable(
                row[0]
            ):  # an empty answer cached by an older version: no answer
                conn.execute("DELETE FROM responses WHERE key=?", (key,))
                conn.commit()
                row = None
            reply = CachedReply(row[0], int(row[1]), int(row[2])) if row else None
        except (sqlite3.Error, TypeError, ValueError) as exc:
            raise unreadable(self.path, exc) from None
        with self._lock:
            self._counts[phase]["hits" if reply else "misses"] += 1
        return reply

    def put(
        self, key: str, *, phase: str, template: str, backend: str, model: str, reply: CachedReply
    ) -> None:
        if not self.enabled or not usable(reply.text):  # an empty reply is a failed call, never an answer
            return
        conn = self._conn()
        row = (
            key,
            phase,
            template,
            backend,
            model,
            reply.text,
            reply.tokens_in,
            reply.tokens_out,
            time.time(),
        )
        try:
            conn.execute("INSERT OR IGNORE INTO responses VALUES (?,?,?,?,?,?,?,?,?)", row)
            conn.commit()
        except sqlite3.Error as exc:
            raise unreadable(self.path, exc) from None

    def __len__(self) -> int:
        if not self.enabled:
            return 0
        return int(self._conn().execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def stats(self) -> dict[str, dict[str, int]]:
        """Hits and misses per phase seen by this process."""
        with self._lock:
            return {phase: dict(c) for phase, c in sorted(self._counts.items())}

    def close(self) -> None:
        with self._lock:
            for conn in self._conns:
                try:
                    conn.close()
                except sqlite3.ProgrammingError:  # closed from another thread already
                    pass
            self._conns.clear()
        self._local = threading.local()
