"""Scoring: predictions → metrics, under a named protocol (``allmem`` by default).

The runner writes ``score_records(records, protocol)`` into ``metrics.json``; ``allmem score FILE --protocol
NAME`` prints ``score_file(FILE, NAME)``. Both go through the same validation and the same aggregation, so
they agree exactly on the same predictions.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from allmem.metrics.aggregate import summarise
from allmem.metrics.protocols import PROTOCOLS, Protocol, RecordError, get_protocol, validate_record
from allmem.metrics.retrieval import rank_source_ids

__all__ = [
    "Protocol",
    "RecordError",
    "get_protocol",
    "item_scores",
    "load_predictions",
    "main",
    "rank_source_ids",
    "score_file",
    "score_records",
]


def _protocol(protocol: str | Protocol) -> Protocol:
    return protocol if isinstance(protocol, Protocol) else get_protocol(protocol)


def _validate_all(records: Sequence[Any], places: Sequence[str]) -> list[dict[str, Any]]:
    """Validate every record and refuse duplicates (a resumed run writing a question twice would count it
    twice). Uniqueness is per (dialogue_id, question_id) because loaders may number questions per dialogue."""
    out: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], str] = {}
    for raw, where in zip(records, places, strict=True):
        rec = validate_record(raw, where)
        key = (rec["dialogue_id"], rec["question_id"])
        if key in seen:
            raise RecordError(
                f"{where}: field 'question_id': duplicate {rec['question_id']!r} (first at {seen[key]})"
            )
        seen[key] = where
        out.append(rec)
    return out


def score_records(
    records: Sequence[Mapping[str, Any]], protocol: str | Protocol = "allmem"
) -> dict[str, Any]:
    """The summary for prediction records (dicts with the ``predictions.jsonl`` fields); JSON-serialisable."""
    proto = _protocol(protocol)
    valid = _validate_all(records, [f"record {i}" for i in range(len(records))])
    return summarise(valid, proto)


def item_scores(
    records: Sequence[Mapping[str, Any]], protocol: str | Protocol = "allmem"
) -> list[dict[str, float | None] | None]:
    """Per-item metric values (None where excluded or not applicable), aligned with ``records``."""
    proto = _protocol(protocol)
    valid = _validate_all(records, [f"record {i}" for i in range(len(records))])
    return [proto.score_item(r) if proto.includes(r) else None for r in valid]


def load_predictions(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate a ``predictions.jsonl``; errors name the file, the line and the field."""
    path = Path(path)
    raws: list[Any] = []
    places: list[str] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                raws.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise RecordError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            places.append(where)
    return _validate_all(raws, places)


def score_file(path: str | Path, protocol: str | Protocol = "allmem") -> dict[str, Any]:
    """``score_records`` over a predictions JSONL file."""
    proto = _protocol(protocol)
    return score_records(load_predictions(path), proto)


def main(argv: Sequence[str] | None = None) -> int:
    """``allmem score FILE --protocol NAME [--out PATH]``; ``argv`` is what follows ``score``."""
    parser = argparse.ArgumentParser(prog="allmem score", description="Score a predictions.jsonl file.")
    parser.add_argument("file", type=Path, help="predictions.jsonl of a run")
    parser.add_argument("--protocol", default="allmem", choices=sorted(PROTOCOLS))
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON summary here")
    args = parser.parse_args(argv)
    try:
        result = score_file(args.file, args.protocol)
    except (OSError, ValueError) as exc:
        print(f"allmem score: error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2, allow_nan=False)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0
