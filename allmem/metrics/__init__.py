"""Scoring: predictions → metrics, under a protocol (``allmem`` by default).

The runner writes ``score_records(records, protocol)`` into ``metrics.json`` with the run's ``Protocol`` object;
``allmem score RUN_DIR`` prints ``score_file`` under the same protocol, read from the run's ``config.yaml``
(ks and table k included). Both go through the same validation and the same aggregation, so they agree exactly
on the same predictions.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from allmem.files import CONFIG, PREDICTIONS, iter_jsonl, read_config_data
from allmem.metrics import granularity
from allmem.metrics.aggregate import summarise
from allmem.metrics.errata import errata_block
from allmem.metrics.protocols import (
    PROTOCOLS,
    Protocol,
    RecordError,
    as_protocol,
    get_protocol,
)
from allmem.metrics.retrieval import rank_source_ids
from allmem.types import ASK_POINTS, Prediction, record_key

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


def _validate_all(records: Sequence[Any], places: Sequence[str]) -> list[dict[str, Any]]:
    """Validate every record and refuse duplicates (a resumed run writing a question twice would count it
    twice) and failed questions (a failed line is no result: the run must be completed first). Uniqueness is
    per (dialogue_id, question_id) because loaders may number questions per dialogue."""
    out: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], str] = {}
    for raw, where in zip(records, places, strict=True):
        pred = raw if isinstance(raw, Prediction) else Prediction.from_json(raw, where)
        if pred.error is not None:
            raise RecordError(
                f"{where}: question {pred.question_id!r} failed ({pred.error}); the run is incomplete: "
                "run it again to retry its failed questions, then score it"
            )
        rec = pred.scoring_view()
        key = record_key(rec)  # ask=both: a record per ask point
        if key in seen:
            raise RecordError(
                f"{where}: field 'question_id': duplicate {rec['question_id']!r} (first at {seen[key]})"
            )
        seen[key] = where
        out.append(rec)
    return out


def score_records(
    records: Sequence[Mapping[str, Any]], protocol: str | Protocol = "allmem", dataset: str | None = None
) -> dict[str, Any]:
    """The summary for prediction records (dicts with the ``predictions.jsonl`` fields); JSON-serialisable.
    With ``dataset`` named and an errata file for it (``allmem.metrics.errata``), also ``errata``: the same
    summary with the answer-key errata applied, and which questions they changed."""
    proto = as_protocol(protocol)
    valid = _validate_all(records, [f"record {i}" for i in range(len(records))])
    points = sorted({r["ask"] for r in valid}, key=ASK_POINTS.index)
    if len(points) > 1:  # protocol.ask=both: the summary of each ask point, the end one also at the top
        out = _summary(valid, proto, dataset, "end")
        out["by_ask"] = {p: _summary(valid, proto, dataset, p) for p in points}
        return out
    return _summary(valid, proto, dataset, None)


def _summary(
    valid: list[dict[str, Any]], proto: Protocol, dataset: str | None, ask: str | None
) -> dict[str, Any]:
    """``summarise`` (+ the errata block) of the records asked at ``ask`` (every record when None)."""
    if ask is not None:
        valid = [r for r in valid if r["ask"] == ask]
    out = summarise(valid, proto)
    out[granularity.KEY] = granularity.summary(valid, proto)  # retrieval at every granularity
    if dataset is not None and (block := errata_block(valid, proto, dataset)) is not None:
        out["errata"] = block
    return out


def item_scores(
    records: Sequence[Mapping[str, Any]], protocol: str | Protocol = "allmem"
) -> list[dict[str, float | None] | None]:
    """Per-item metric values (None where excluded or not applicable), aligned with ``records``."""
    proto = as_protocol(protocol)
    valid = _validate_all(records, [f"record {i}" for i in range(len(records))])
    return [proto.score_item(r) if proto.includes(r) else None for r in valid]


def load_predictions(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate a ``predictions.jsonl``; errors name the file, the line and the field."""
    path = Path(path)
    lines = list(iter_jsonl(path))
    raws, places = [value for _, value in lines], [f"{path}:{n}" for n, _ in lines]
    return _validate_all(raws, places)


def score_file(
    path: str | Path, protocol: str | Protocol = "allmem", dataset: str | None = None
) -> dict[str, Any]:
    """``score_records`` over a predictions JSONL file."""
    proto = as_protocol(protocol)
    return score_records(load_predictions(path), proto, dataset)


def dataset_for(path: Path) -> str | None:
    """The dataset name in the run's ``config.yaml`` beside ``path`` (None without one): it picks the errata."""
    cfg_path = (path if path.is_dir() else path.parent) / CONFIG
    if not cfg_path.is_file():
        return None
    name = (read_config_data(cfg_path.parent).get("dataset") or {}).get("name")
    return str(name) if name else None


def protocol_for(path: Path, name: str | None, ks: str | None, table_k: int | None) -> Protocol:
    """The protocol to score ``path`` with: the run's own (``config.yaml`` beside it) unless overridden."""
    cfg_path = (path if path.is_dir() else path.parent) / CONFIG
    node: dict[str, Any] = {"name": "allmem", "ks": None, "table_k": None}  # None: the configs' cut-offs
    if cfg_path.is_file():
        stored = read_config_data(cfg_path.parent).get("protocol") or {}
        node.update(
            {k: stored[k] for k in ("name", "ks", "table_k") if k in stored}
        )  # by name, never _target_
    if name is not None and name != node["name"]:
        node = {"name": name, "ks": None, "table_k": None}
    if ks is not None:
        node["ks"] = [int(k) for k in ks.split(",") if k.strip()]
    if table_k is not None:
        node["table_k"] = table_k
    return get_protocol(str(node["name"]), node["ks"], node["table_k"])


def main(argv: Sequence[str] | None = None) -> int:
    """``allmem score PATH [--protocol NAME] [--ks 1,3,5] [--table-k K] [--out FILE]``."""
    parser = argparse.ArgumentParser(
        prog="allmem score",
        description="Score a run's predictions. The protocol, its ks and table k are the run's own "
        "(config.yaml beside the file) unless given here; without a config: allmem, ks 1,3,5,10, table k 5.",
    )
    parser.add_argument("path", type=Path, help="a run directory or its predictions.jsonl")
    parser.add_argument("--protocol", default=None, choices=sorted(PROTOCOLS))
    parser.add_argument("--ks", default=None, help="comma-separated R@k/N@k cut-offs, e.g. 1,3,5,10")
    parser.add_argument("--table-k", type=int, default=None, help="the k of the table columns (one of --ks)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON summary here")
    args = parser.parse_args(argv)
    file = args.path / PREDICTIONS if args.path.is_dir() else args.path
    try:
        proto = protocol_for(args.path, args.protocol, args.ks, args.table_k)
        result = score_file(file, proto, dataset_for(args.path))
    except (OSError, ValueError) as exc:
        print(f"allmem score: error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2, allow_nan=False)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0
