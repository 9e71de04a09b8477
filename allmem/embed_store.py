"""The embedding cache's SQLite file: one table (model, key) -> float32 blob, shared by concurrent processes (WAL,
``cache_store.SqliteStore``).

Damage is repaired, not reported: the cache only saves time, and a damaged vector used silently changes results
(NaN vectors once took F1 from 46 to 13). Every vector read is checked (width, finite, unit length) and computed
again if bad; a file that is not the cache's database is moved aside and a new one started (docs/DESIGN.md,
"Caches"). A busy or locked database is not damage: that error is raised as it is."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from allmem import cache_store

log = logging.getLogger(__name__)

SQL_CHUNK = 500  # host parameters per IN (...) query, under SQLite's limit
UNIT_TOL = 1e-3  # |norm - 1| above this is not a vector the embedder wrote (float32 rounding is ~1e-7)


def valid_vector(vec: np.ndarray, dim: int) -> bool:
    """A vector the embedder could have written: ``dim`` finite float32 values of unit length."""
    return (
        vec.shape == (dim,)
        and bool(np.isfinite(vec).all())
        and abs(float(np.linalg.norm(vec)) - 1.0) <= UNIT_TOL
    )


class VectorStore(cache_store.SqliteStore):
    """SQLite table (model, key) -> float32 blob."""

    TABLE = "vectors"
    COLUMNS = ("model", "key", "dim", "vec")
    CREATE = (
        "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, key TEXT NOT NULL, dim INTEGER NOT NULL,"
        " vec BLOB NOT NULL, PRIMARY KEY (model, key)) WITHOUT ROWID"
    )
    WHAT = "embedding cache"
    THEN = "started a new one (vectors are computed again)"

    def __init__(self, path: Path, dim: int) -> None:
        self.dim = dim
        super().__init__(path)

    def get_many(self, model: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored vectors of ``keys`` that pass ``valid_vector``; the others count as misses (and are
        replaced when ``put_many`` stores them again)."""

        def work(conn: sqlite3.Connection) -> dict[str, np.ndarray]:
            out: dict[str, np.ndarray] = {}
            bad = 0
            for i in range(0, len(keys), SQL_CHUNK):
                chunk = list(keys[i : i + SQL_CHUNK])
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(
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

        return self._run(work)

    def put_many(self, model: str, items: Iterable[tuple[str, np.ndarray]]) -> None:
        """Store vectors; a key already present is replaced (a vector depends on its text alone, so a concurrent
        writer stores the same bytes, and a damaged one is overwritten)."""
        rows: list[Any] = [
            (model, k, int(v.shape[0]), np.ascontiguousarray(v, dtype=np.float32).tobytes()) for k, v in items
        ]

        def work(conn: sqlite3.Connection) -> None:
            with conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO vectors (model, key, dim, vec) VALUES (?, ?, ?, ?)", rows
                )

        self._run(work)
