"""The comparison rule (``same_result``: whether two run directories hold the same result; what may differ is
``SAME_RESULT_IGNORES``, nothing else) and ``allmem compare`` (docs/DESIGN.md)."""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from allmem import files
from allmem.run import attempts
from allmem.run.identity import identity, recorded_hash

# Fields that may differ between two runs of the same config on the same data and code, and only those
# (docs/DESIGN.md): a key matching one of these glob patterns is left out wherever it occurs, in every file.
SAME_RESULT_IGNORES: tuple[str, ...] = (
    "*latency*", "*_ms", "*_ms_*", "*_s", "*_s_*",  # timings: latency_ms, write_describe_ms, wall_s, ingest_s
    "cached", "spent_tokens_*",  # a cached reply and what it spared (the cache state on this machine)
    "bank_cache", "reused",  # a bank loaded from the bank cache, and the ATC events that came with it
    "embedding_cache",  # how many of a dialogue's texts the embedding store already held
    "attempt", "attempts", "retries",  # how many tries it took
    "cost_all_attempts",  # what every try spent, work an interrupted attempt left unfinished included
    "*_at", "pid", "argv",  # when and by which process
)  # fmt: skip
# The files compared, each read as a multiset of records (order is the schedule's, not the result's).
# contexts.jsonl.gz is derived from what predictions record (the retrieval, the budget), so it is compared too:
# the stronger check, and a worker count or resume that changed a context would show here first.
_COMPARED = (files.PREDICTIONS, files.CALLS, files.SYSTEM_STATS, files.EVENTS, files.CONTEXTS)


def _all(rec: dict[str, Any]) -> bool:
    return True


def _ignored(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pat) for pat in SAME_RESULT_IGNORES)


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if not _ignored(str(k))}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _diff(a: Any, b: Any, where: str, out: list[str], limit: int) -> None:
    if len(out) >= limit or a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only in {'B' if k not in a else 'A'}")
            else:
                _diff(a[k], b[k], f"{where}.{k}", out, limit)
            if len(out) >= limit:
                return
        return
    out.append(f"{where}: {json.dumps(a, default=str)[:80]} != {json.dumps(b, default=str)[:80]}")


def _records(path: Path, keep: Callable[[dict[str, Any]], bool] = _all) -> dict[str, Any]:
    """A JSONL file's records that ``keep`` accepts, without ignored fields, keyed by question (predictions) or
    by content."""
    out: dict[str, Any] = {}
    for rec in filter(keep, files.read_jsonl(path)):
        rec = _strip(rec)
        key = json.dumps(rec, sort_keys=True, default=str)
        if path.name == files.PREDICTIONS:
            key = f"{rec.get('dialogue_id')}/{rec.get('question_id')}@{rec.get('ask') or 'end'}"
        while key in out:  # the same line twice is kept twice
            key += "+"
        out[key] = rec
    return out


def _json_view(path: Path) -> dict[str, Any]:
    """Metrics or the manifest without ignored fields ({} when absent); the manifest's ``data`` by content only
    (where the data lay is placement)."""
    data = files.read_json(path) if path.exists() else {}
    if isinstance(data.get("data"), dict):
        data["data"] = sorted(data["data"].values())
    return _strip(data)


def version_differences(a: Path, b: Path) -> list[str]:
    """One line per package of ``attempts.NUMERIC_PACKAGES`` whose version the two runs' manifests record
    differently: the first suspect when two runs of one config disagree."""
    pa, pb = ((_json_view(d / files.MANIFEST).get("packages") or {}) for d in (a, b))
    return [
        f"{files.MANIFEST}.packages: {name} {pa.get(name) or 'absent'} != {pb.get(name) or 'absent'} "
        "(a package that can change numbers)"
        for name in attempts.NUMERIC_PACKAGES
        if pa.get(name) != pb.get(name)
    ]


def _manifest_view(run_dir: Path, versions_named: bool) -> dict[str, Any]:
    """The manifest as compared; the versions ``version_differences`` named already are not named again."""
    view = _json_view(run_dir / files.MANIFEST)
    if versions_named:
        for entry in (view, *(view.get("attempts") or ())):
            if isinstance(entry, dict) and isinstance(entry.get("packages"), dict):
                for name in attempts.NUMERIC_PACKAGES:
                    entry["packages"].pop(name, None)
    return view


def same_result(a: Path, b: Path, limit: int = 5) -> list[str]:
    """Whether run directories ``a`` and ``b`` hold the same result: [] if so, else the first ``limit``
    differences, one line each. Compares the identity of ``config.yaml`` (``identity``: placement keys left
    out), ``metrics.json``, the manifest and every JSON-lines file (predictions by question, the others as a
    multiset of lines), each without the fields in ``SAME_RESULT_IGNORES``. A version difference of a package
    that can change numbers (``version_differences``) is named first."""
    a, b = Path(a), Path(b)
    versions = version_differences(a, b)
    out: list[str] = list(versions)
    for name in (files.CONFIG, files.METRICS, files.MANIFEST, *_COMPARED, files.DONE):
        if (a / name).exists() != (b / name).exists():
            out.append(f"{name}: only in {'A' if (a / name).exists() else 'B'}")
    ia, ib = (identity(files.read_config_data(p)) for p in (a, b))
    _diff(ia, ib, files.CONFIG, out, limit)
    _diff(_json_view(a / files.METRICS), _json_view(b / files.METRICS), files.METRICS, out, limit)
    _diff(*(_manifest_view(d, bool(versions)) for d in (a, b)), files.MANIFEST, out, limit)
    for name in _COMPARED:
        # calls.jsonl: the calls behind the kept results, as run_cost counts them (an interrupted attempt's
        # unfinished work is spent, not part of the result)
        ra, rb = (_records(d / name, attempts.kept_call(d) if name == files.CALLS else _all) for d in (a, b))
        if name == files.PREDICTIONS:
            _diff(ra, rb, name, out, limit)
        else:
            only_a, only_b = sorted(set(ra) - set(rb)), sorted(set(rb) - set(ra))
            if only_a or only_b:
                out.append(f"{name}: {len(only_a)} lines only in A, {len(only_b)} only in B")
    return out[:limit]


def same_predictions(a: Path, b: Path, limit: int = 5) -> list[str]:
    """The rule on ``predictions.jsonl`` alone ([] when equal): for runs of two configs that must answer alike,
    such as a system in-process and the same system behind ``method=http`` (tests/test_remote.py)."""
    out: list[str] = []
    _diff(
        _records(Path(a) / files.PREDICTIONS),
        _records(Path(b) / files.PREDICTIONS),
        files.PREDICTIONS,
        out,
        limit,
    )
    return out[:limit]


def _is_run(path: Path) -> bool:
    return (path / files.CONFIG).is_file()


def _runs(root: Path) -> dict[str, Path]:
    """Run directories under ``root`` by their path relative to it."""
    found = (p.parent for p in sorted(root.rglob(files.CONFIG)))
    # a run folder's own sub-folders (W&B's offline run writes a config.yaml of its own) hold no run
    return {d.relative_to(root).as_posix(): d for d in found if "wandb" not in d.relative_to(root).parts}


def compare_roots(a: Path, b: Path) -> list[tuple[str, list[str] | None]]:
    """``(run, differences)`` per run of either root; differences None when the other root lacks it."""
    ra, rb = _runs(a), _runs(b)
    by_hash = {h: rel for rel, p in rb.items() if (h := recorded_hash(p))}
    out: list[tuple[str, list[str] | None]] = []
    matched: set[str] = set()
    for rel, path in ra.items():
        other = rel if rel in rb else by_hash.get(recorded_hash(path) or "")
        if other is None:
            out.append((rel, None))
            continue
        matched.add(other)
        out.append((rel if other == rel else f"{rel} ~ {other}", same_result(path, rb[other])))
    out += [(rel, None) for rel in rb if rel not in matched]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="allmem compare",
        description="Whether two run directories (or two folders of runs) hold the same results; exit 0 only "
        "if every run is the same. Latencies, cached flags, attempt numbers, timestamps, pid and argv are "
        "ignored (allmem.run.compare.SAME_RESULT_IGNORES).",
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
            results = [(f"{args.a} vs {args.b}", same_result(args.a, args.b))]
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
