"""The one helper of the caches (docs/DESIGN.md, "Caches"): the key rule (``code_key``), atomic writes, a lock,
damaged entries set aside with one warning (a cache only saves time, never costs a run), and one SQLite table
shared by concurrent processes (``SqliteStore``: the embedding cache's ``VectorStore``, and ``TextStore``, the
offline roles' replies). A value read from a store is checked, and computed again if bad."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import sqlite3
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from allmem import files
from allmem.fingerprint import source_fingerprint

log = logging.getLogger(__name__)
T = TypeVar("T")


def code_key(sources: tuple[str, ...], *parts: Any, length: int = 24) -> str:
    """sha256 (``length`` hex) over ``parts`` (canonical JSON) and the source fingerprint of ``sources``."""
    blob = json.dumps([source_fingerprint(tuple(sources)), parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


@lru_cache(maxsize=16)
def library_identity(*dists: str) -> tuple[tuple[str, str], ...]:
    """What a value computed by the installed distributions ``dists`` depends on besides allmem's code, for a cache
    key: Python's version and Unicode tables, and the version of each distribution and of every one it requires
    (extras aside), followed down the tree ("absent" where one is not installed)."""
    out = {"python": sys.version.split()[0], "unicode": unicodedata.unidata_version}
    todo = list(dists)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in out:
            continue
        try:
            out[name] = metadata.version(name)
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            out[name] = "absent"
            continue
        todo += [
            m.group(0) for r in requires if "extra ==" not in r and (m := re.match(r"[A-Za-z0-9._-]+", r))
        ]
    return tuple(sorted(out.items()))


def set_aside(path: Path, reason: object, *, cache: str, then: str, companions: tuple[str, ...] = ()) -> None:
    """Move a damaged entry (file or folder, and the ``<path><suffix>`` files of ``companions``) aside and warn
    once: ``<cache> <path>: <reason>; moved it aside to ...; <then>``."""
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}")
    try:
        os.replace(path, aside)
        where = f"moved it aside to {aside}"
    except OSError as exc:  # another process moved it first, or the folder is read-only
        where = f"could not move it aside ({exc.strerror})"
    for suffix in companions:  # e.g. SQLite's WAL files belong to the damaged database
        try:
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")
        except FileNotFoundError:
            pass
    log.warning("%s %s: %s; %s; %s", cache, path, reason, where, then)


def read(path: Path, load: Callable[[Path], T], *, cache: str, then: str) -> T | None:
    """``load(path)``, or None when there is no entry or it is damaged (``load`` raised ``OSError`` or
    ``ValueError``): a damaged entry is set aside."""
    if not os.path.lexists(path):
        return None
    try:
        return load(path)
    except (OSError, ValueError) as exc:
        set_aside(path, exc, cache=cache, then=then)
        return None


def write_folder(final: Path, fill: Callable[[Path], Any]) -> Path:
    """``fill`` a temporary folder beside ``final``, then rename it into place (``allmem.files.write_folder``,
    which also removes the temporary folders of dead writers); a concurrent writer of the same key wins."""
    try:
        return files.write_folder(final, fill)
    except OSError:
        if final.exists():  # another process stored the same key first: its entry is as good
            return final
        raise


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``<path>.lock`` (waits for it): for a read-merge-write of a shared file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f"{path.name}{files.LOCK}"), "a") as fh:  # <name>.lock, as a run's lock
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


_DAMAGE_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)  # primary result codes of a damaged file


class DamagedStore(Exception):
    """The file is not the cache's database (the message names it); the store sets it aside and starts again."""


class SqliteStore:
    """One table in a SQLite file shared by concurrent processes (WAL, busy timeout), set aside when damaged.
    Subclasses name the table, its columns and its ``CREATE`` statement, and what a lost entry costs."""

    TABLE = ""
    COLUMNS: tuple[str, ...] = ()
    CREATE = ""
    WHAT = ""  # the cache's name in the warning
    THEN = ""  # what happens to its entries after a set-aside

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.repaired = 0  # values read back damaged and computed again
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._safely(lambda: None)

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.path), timeout=60.0, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(self.CREATE)
            conn.commit()
            columns = tuple(row[1] for row in conn.execute(f"PRAGMA table_info({self.TABLE})"))
            if columns != self.COLUMNS:
                raise DamagedStore(
                    f"table {self.TABLE!r} has columns {list(columns)}, expected {list(self.COLUMNS)}"
                )
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
        set_aside(self.path, exc, cache=self.WHAT, companions=("-wal", "-shm"), then=self.THEN)

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(connection)`` under the store's lock, on an open connection (``_safely``)."""

        def call() -> T:
            assert self._conn is not None
            return work(self._conn)

        with self._lock:
            return self._safely(call)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def text_digest(key: str, text: str) -> str:
    """What ``TextStore`` checks a stored text against: sha256 hex of its key and its text (so a text filed under
    another key fails too)."""
    return hashlib.sha256(f"{key}\0{text}".encode()).hexdigest()


class TextStore(SqliteStore):
    """SQLite table key -> text, each row stored with its sha256 (``text_digest``): a text whose bytes, or key, no
    longer match is a miss, computed again and replaced."""

    TABLE = "texts"
    COLUMNS = ("key", "text", "sha256")
    CREATE = (
        "CREATE TABLE IF NOT EXISTS texts (key TEXT NOT NULL PRIMARY KEY, text TEXT NOT NULL,"
        " sha256 TEXT NOT NULL) WITHOUT ROWID"
    )
    WHAT = "offline reply cache"
    THEN = "started a new one (replies are computed again)"

    def get(self, key: str) -> str | None:
        """The stored text of ``key``, or None (none stored, or stored damaged)."""

        def work(conn: sqlite3.Connection) -> str | None:
            row = conn.execute("SELECT text, sha256 FROM texts WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            text, digest = row
            if isinstance(text, str) and text_digest(key, text) == digest:
                return text
            if not self.repaired:
                log.warning(
                    "%s %s: a stored text does not match its sha256; computing it again "
                    "(further ones are repaired without a warning)",
                    self.WHAT,
                    self.path,
                )
            self.repaired += 1
            return None

        return self._run(work)

    def put(self, key: str, text: str) -> None:
        """Store ``text`` under ``key``, replacing what is there (a concurrent writer stores the same text)."""

        def work(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute(
                    "INSERT OR REPLACE INTO texts (key, text, sha256) VALUES (?, ?, ?)",
                    (key, text, text_digest(key, text)),
                )

        self._run(work)
