"""Every run's per-question records as one table (pandas → Parquet), to slice results without re-running.

One row per question per run: the run's identity (method, dataset, protocol, run directory, config hash, backend,
source fingerprint, git sha), every result-changing config key flattened as ``cfg.<dotted key>``, the prediction record's fields
(latencies flattened as ``latency_ms.<stage>``, the judge verdict as ``judge_verdict``) and the per-question
metric values in [0, 1] under the run's protocol (NaN where a metric does not apply).

A summarise step adds to the table rather than replacing it (``write_parquet``): ``make memgpt_window`` after ``make
paper`` leaves the paper's runs in it. Only rows made by the same code as the new ones are kept, and only while
their run directory is there, so the table never mixes code versions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from allmem import files
from allmem.report.items import KEYS, item_frame
from allmem.report.runs import Run
from allmem.types import record_key

NOT_CONFIG = ("run", "paths", "wandb", "hydra")  # keys that place or name a run, not what it computed


def _flatten(d: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def config_columns(run: Run) -> dict[str, Any]:
    data = files.plain(run.cfg)
    return _flatten({k: v for k, v in data.items() if k not in NOT_CONFIG}, "cfg.")


def run_frame(run: Run) -> pd.DataFrame:
    records = run.records()
    rows = []
    for rec in records:
        row: dict[str, Any] = {}
        for key, value in rec.items():
            if key == "latency_ms" and isinstance(value, Mapping):
                row.update({f"latency_ms.{k}": float(v) for k, v in value.items()})
            elif key == "judge" and isinstance(value, Mapping):
                row["judge_verdict"] = value.get("verdict")
            elif isinstance(value, Mapping):
                row[key] = json.dumps(value, sort_keys=True, default=str)
            else:
                row[key] = value
        row["ask"] = record_key(rec)[2]
        rows.append(row)
    frame = pd.DataFrame(rows)
    scores = item_frame(run).drop(columns=["group", "context_tokens"], errors="ignore")
    scores = scores.rename(columns={c: f"score.{c}" for c in scores.columns if c not in KEYS})
    if not frame.empty:
        frame = frame.merge(scores, on=list(KEYS), how="left")
    ident = {"method": run.method, "dataset": run.dataset, "protocol": run.protocol.name, "run_dir": str(run.path),
             "config_hash": run.config_hash, "offline": run.offline, "code": run.code,
             "git_sha": run.git_sha}  # fmt: skip
    config = {k: json.dumps(v) if isinstance(v, list) else v for k, v in config_columns(run).items()}
    constants = pd.DataFrame({**ident, **config}, index=frame.index)  # one join: a column at a time fragments
    return pd.concat([constants[list(ident)], frame.drop(columns=list(config), errors="ignore"),
                      constants[list(config)]], axis=1)  # fmt: skip


def _tidy(frame: pd.DataFrame) -> pd.DataFrame:
    """Parquet needs one type per column: a column mixing types (a config key that is a number in one run and a
    string in another) is stored as strings."""
    for col in frame.columns:
        if frame[col].dtype != object:  # a numeric, boolean or string dtype holds one type already
            continue
        kinds = {type(v) for v in frame[col].dropna()}
        if len(kinds - {int, float}) > 0 and len(kinds) > 1:
            frame[col] = frame[col].map(
                lambda v: None if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)
            )
    return frame


def question_table(runs: Iterable[Run]) -> pd.DataFrame:
    parts = [run_frame(r) for r in runs]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame()
    return _tidy(pd.concat(parts, ignore_index=True, sort=False))


def _kept_rows(path: Path, new: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``path`` (an earlier summarise's table) worth keeping beside ``new``: other runs, made by the
    same code as ``new``'s, whose directories are still there. An unreadable or older-format table keeps nothing."""
    if new.empty or not path.exists():
        return pd.DataFrame()
    try:
        old = pd.read_parquet(path)
    except (OSError, ValueError) as exc:  # damaged or not Parquet: it is written anew from the runs
        print(f"[allmem] {path}: not readable ({type(exc).__name__}); written anew from this step's runs")
        return pd.DataFrame()
    if not {"code", "config_hash", "run_dir"} <= set(old.columns):
        return pd.DataFrame()
    present = {d for d in old["run_dir"].dropna().unique() if Path(str(d)).is_dir()}  # one look per run
    keep = (
        ~old["config_hash"].isin(set(new["config_hash"]))
        & old["code"].isin(set(new["code"].dropna()))
        & old["run_dir"].isin(present)
    )
    return old[keep]


def write_parquet(runs: Iterable[Run], path: Path) -> tuple[Path, int]:
    """Writes ``runs``' records to ``path`` with the rows of other runs it already held (``_kept_rows``); returns
    the path and how many runs' rows were kept."""
    table = question_table(runs)
    kept = _kept_rows(path, table)
    if not kept.empty:
        table = _tidy(pd.concat([table, kept], ignore_index=True, sort=False))
    n_kept = int(kept["config_hash"].nunique()) if not kept.empty else 0
    return files.write_via(path, lambda tmp: table.to_parquet(tmp, index=False)), n_kept
