"""``allmem compare A B``: whether two run directories, or two run roots, hold the same results.

The rule is ``allmem.run.files.same_result`` (its ``SAME_RESULT_IGNORES`` names what may differ between equal
runs). Given two roots, runs are matched by their path under the root, else by their config hash (the same
config reached through other overrides); each is reported "same", "differs: ..." or "missing". Exit 0 only when
every run is the same.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from allmem.run import files


def _is_run(path: Path) -> bool:
    return (path / files.CONFIG).is_file()


def _runs(root: Path) -> dict[str, Path]:
    """Run directories under ``root`` by their path relative to it."""
    return {p.parent.relative_to(root).as_posix(): p.parent for p in sorted(root.rglob(files.CONFIG))}


def _hash(run: Path) -> str | None:
    path = run / files.METRICS
    try:
        return (json.loads(path.read_text(encoding="utf-8")).get("run") or {}).get("config_hash")
    except (OSError, ValueError):
        return None


def compare_roots(a: Path, b: Path) -> list[tuple[str, list[str] | None]]:
    """``(run, differences)`` per run of either root; differences None when the other root lacks it."""
    ra, rb = _runs(a), _runs(b)
    by_hash = {h: rel for rel, p in rb.items() if (h := _hash(p))}
    out: list[tuple[str, list[str] | None]] = []
    matched: set[str] = set()
    for rel, path in ra.items():
        other = rel if rel in rb else by_hash.get(_hash(path) or "")
        if other is None:
            out.append((rel, None))
            continue
        matched.add(other)
        out.append((rel if other == rel else f"{rel} ~ {other}", files.same_result(path, rb[other])))
    out += [(rel, None) for rel in rb if rel not in matched]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="allmem compare",
        description="Whether two run directories (or two folders of runs) hold the same results; exit 0 only "
        "if every run is the same. Latencies, cached flags, attempt numbers, timestamps, pid and argv are "
        "ignored (allmem.run.files.SAME_RESULT_IGNORES).",
    )
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    for p in (args.a, args.b):
        if not p.is_dir():
            print(f"allmem compare: error: {p}: not a folder", file=sys.stderr)
            return 1
    try:
        if _is_run(args.a) and _is_run(args.b):
            results = [(f"{args.a} vs {args.b}", files.same_result(args.a, args.b))]
        else:
            results = compare_roots(args.a, args.b)
    except ValueError as exc:  # ConfigError (an unreadable config.yaml), a corrupt JSON line: named, one line
        print(f"allmem compare: error: {exc}", file=sys.stderr)
        return 1
        if not results:
            print(f"allmem compare: error: no run directory under {args.a} or {args.b}", file=sys.stderr)
            return 1
    bad = 0
    for name, diffs in results:
        if diffs is None:
            print(f"{name}: missing (in one of the two only)")
        elif diffs:
            print(f"{name}: differs: {'; '.join(diffs)}")
        else:
            print(f"{name}: same")
        bad += diffs is None or bool(diffs)
    print(f"[allmem] compare: {len(results) - bad} of {len(results)} the same")
    return 1 if bad else 0
