"""The embedding cache's SQLite file: one table (model, key) -> float32 blob, shared by concurrent processes (WAL).

Damage is repaired, not reported: the cache only saves time, and a damaged vector used silently changes results
(NaN vectors once took F1 from 46 to 13). Every vector read is checked (width, finite, unit length) and computed
again if bad; a file that is not the cache's database is moved aside and a new one started (docs/DESIGN.md,
"Caches"). A busy or locked database is not damage: that error is raised as it is."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from allmem import cache_store

log = logging.getLogger(__name__)

SQL_CHUNK = 500  # host parameters per IN (...) query, under SQLite's limit
UNIT_TOL = 1e-3  # |norm - 1| above this is not a vector the embedder wrote (float32 rounding is ~1e-7)
_COLUMNS = ["model", "key", "dim", "vec"]
_DAMAGE_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)  # primary result codes of a damaged file
T = TypeVar("T")


class DamagedStore(Exception):
    """The file is not the cache's database (the message names it); the store sets it aside and starts again."""


def valid_vector(vec: np.ndarray, dim: int) -> bool:
    """A vector the embedder could have written: ``dim`` finite float32 values of unit length."""
    return (
        vec.shape == (dim,)
        and bool(np.isfinite(vec).all())
        and abs(float(np.linalg.norm(vec)) - 1.0) <= UNIT_TOL
    )


class VectorStore:
    """SQLite table (model, key) -> float32 blob; safe for concurrent processes (WAL, busy timeout)."""

    def __init__(self, path: Path, dim: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.dim = dim
        self.repaired = 0  # vectors read back damaged and computed again
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._safely(lambda: None)

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.path), timeout=60.0, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, key TEXT NOT NULL, dim INTEGER NOT NULL,"
                " vec BLOB NOT NULL, PRIMARY KEY (model, key)) WITHOUT ROWID"
            )
            conn.commit()
            columns = [row[1] for row in conn.execute("PRAGMA table_info(vectors)")]
            if columns != _COLUMNS:
                raise DamagedStore(f"table 'vectors' has columns {columns}, expected {_COLUMNS}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _safely(self, work: Callable[[], T]) -> T:
        """Run ``work`` on an open connection; a damaged file is set aside once, a new one opened, work re-run."""
        for attempt in (1, 2):
            try:
                if self._conn is None:
                    self._conn = self._open()
                return work()
            except (sqlite3.DatabaseError, DamagedStore) as exc:
                code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # a busy or locked file is not damage
                if attempt == 2 or (isinstance(exc, sqlite3.Error) and code not in _DAMAGE_CODES):
                    raise
                self._set_aside(exc)
        raise AssertionError("unreachable")  # pragma: no cover

    def _set_aside(self, exc: BaseException) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        cache_store.set_aside(self.path, exc, cache="embedding cache", companions=("-wal", "-shm"),
                              then="started a new one (vectors are computed again)")  # fmt: skip

    def get_many(self, model: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored vectors of ``keys`` that pass ``valid_vector``; the others count as misses (and are
        replaced when ``put_many`` stores them again)."""

        def work() -> dict[str, np.ndarray]:
            assert self._conn is not None
            out: dict[str, np.ndarray] = {}
            bad = 0
            for i in range(0, len(keys), SQL_CHUNK):
                chunk = list(keys[i : i + SQL_CHUNK])
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT key, vec FROM vectors WHERE model = ? AND key IN ({marks})", [model, *chunk]
                ).fetchall()
                for key, blob in rows:
                    whole = isinstance(blob, bytes) and len(blob) % 4 == 0
                    if whole and valid_vector(vec := np.frombuffer(blob, dtype=np.float32), self.dim):
                        out[key] = vec
                    else:
                        bad += 1
            if bad and not self.repaired:
                log.warning(
                    "embedding cache %s: stored vectors that are not %d finite values of unit length; "
                    "computing them again (further ones are repaired without a warning)",
                    self.path,
                    self.dim,
                )
            self.repaired += bad
            return out

        with self._lock:
            return self._safely(work)

    def put_many(self, model: str, items: Iterable[tuple[str, np.ndarray]]) -> None:
        """Store vectors; a key already present is replaced (a vector depends on its text alone, so a concurrent
        writer stores the same bytes, and a damaged one is overwritten)."""
        rows: list[Any] = [
            (model, k, int(v.shape[0]), np.ascontiguousarray(v, dtype=np.float32).tobytes()) for k, v in items
        ]

        def work() -> None:
            assert self._conn is not None
            with self._conn:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO vectors (model, key, dim, vec) VALUES (?, ?, ?, ?)", rows
                )

        with self._lock:
            self._safely(work)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
