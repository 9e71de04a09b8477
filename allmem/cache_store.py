"""The one helper of the file and folder caches (docs/DESIGN.md, "Caches"): the key rule (``code_key``), atomic
writes, a lock, and damaged entries set aside with one warning (a cache only saves time, never costs a run)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
