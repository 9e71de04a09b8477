"""The fingerprint of the sources that can change a result, the one place it is computed: what counts and who
checks it are in docs/DESIGN.md, "Which code made a result"."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULT_SOURCES: tuple[str, ...] = ("allmem", "baselines", "benchmarks", "configs")
SUFFIXES = (".py", ".txt", ".yaml")
# the report reads run directories; the paper launcher starts `allmem run`: neither changes what a run computes
EXCLUDED = ("allmem/report/", "allmem/experiments.py")


@lru_cache(maxsize=8)
def source_fingerprint(roots: tuple[str, ...] = RESULT_SOURCES) -> str:
    """sha256 (16 hex) over the path and bytes of every source file under ``roots`` (folders or files,
    relative to the repository), in path order."""
    h = hashlib.sha256()
    for root in roots:
        base = REPO / root
        files = [base] if base.is_file() else sorted(base.rglob("*"))
        for path in files:
            rel = path.relative_to(REPO).as_posix()
            if (
                not path.is_file()
                or path.suffix not in SUFFIXES
                or "__pycache__" in rel
                or rel.startswith(EXCLUDED)
            ):
                continue
            h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]
