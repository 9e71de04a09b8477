"""Per-question scores of a run, as a pandas frame: what the intervals, tests and the Parquet table are built on.

Scores come from ``allmem.metrics.item_scores`` under the run's own protocol, so their means are exactly the
numbers of the run's ``metrics.json`` (a test checks it). Scoring 2,000 answers (ROUGE with stemming, BLEU)
takes seconds, and a paper report reads dozens of runs, so the frame is cached on disk, keyed by the content of
``predictions.jsonl``, the protocol and the source fingerprint of ``allmem/metrics`` (``allmem.cache_store``): a
changed file or scorer is rescored. A cached frame is used only when it reads back whole (Parquet page checksums)
with the expected columns, one row per answer and scores in [0, 1]; anything else is set aside with a warning
naming the file, rescored and replaced.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from allmem import cache_store, files
from allmem.paths import cache_dir
from allmem.report.runs import Run, judge_verdicts
from allmem.types import record_key

log = logging.getLogger("allmem.report")
JUDGE = "judge"  # 1 = yes, 0 = no, NaN = invalid or not judged (left out of the 4o-J denominator)
KEYS = ("dialogue_id", "question_id", "ask")  # ask point: protocol.ask=both gives a question two rows


def _score(run: Run) -> pd.DataFrame:
    from allmem.metrics import item_scores

    records = run.records()
    proto = run.protocol
    items = item_scores(records, proto)
    rows = []
    for rec, item in zip(records, items, strict=True):
        row: dict[str, object] = {k: rec.get(k) for k in KEYS}
        row["ask"] = record_key(rec)[2]
        row["group"] = str(rec["category"]) if rec.get("category") is not None else rec.get("question_type")
        row["included"] = item is not None
        row["context_tokens"] = rec.get("context_tokens")
        for name in proto.metric_names():
            value = None if item is None else item.get(name)
            row[name] = np.nan if value is None else float(value)
        verdict = (rec.get("judge") or {}).get("verdict")
        row[JUDGE] = 1.0 if verdict == "yes" else 0.0 if verdict == "no" else np.nan
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        frame = pd.DataFrame(
            columns=[*KEYS, "group", "included", "context_tokens", *proto.metric_names(), JUDGE]
        )
    return frame


def item_frame(run: Run, use_cache: bool = True) -> pd.DataFrame:
    """One row per question of the run: ids, group (category or question type), metric values in [0, 1]. The
    judge column holds the verdicts of the judge ``run.judge`` picks (``runs.with_judge``), else the run's own."""
    frame = _item_frame(run, use_cache)
    verdicts = judge_verdicts(run)
    if verdicts is None:
        return frame
    frame = frame.copy()
    picked = [
        verdicts.get((str(d or ""), str(q), str(a)))
        for d, q, a in zip(frame["dialogue_id"], frame["question_id"], frame["ask"], strict=True)
    ]
    frame[JUDGE] = [1.0 if v == "yes" else 0.0 if v == "no" else np.nan for v in picked]
    return frame


def at_end(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the records asked at the stream's end, the paper's protocol: a run of ``protocol.ask=both`` has
    two records per question and keeps its ``end`` ones; a run with one ask point keeps every row (one per
    question). Tables that read one record per question (Tables 1-4, the retrieval table) read these; the
    retention view reads every row."""
    asks = set(frame["ask"])
    return frame[frame["ask"] == "end"].reset_index(drop=True) if len(asks) > 1 and "end" in asks else frame


def end_frame(run: Run, use_cache: bool = True) -> pd.DataFrame:
    """``item_frame`` of the run's end-of-stream records (``at_end``)."""
    return at_end(item_frame(run, use_cache))


def _item_frame(run: Run, use_cache: bool) -> pd.DataFrame:
    path = run.path / files.PREDICTIONS
    if not use_cache:
        return _score(run)
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()[:24]
    proto = run.protocol
    key = f"{digest}-{cache_store.code_key(('allmem/metrics', 'allmem/reader/framing.py'), proto.name, list(proto.ks), list(KEYS), length=12)}"
    cached = cache_dir() / "report" / "items" / f"{key}.parquet"
    n_lines = sum(1 for line in data.splitlines() if line.strip())

    def load(path: Path) -> pd.DataFrame:  # torn, garbled or not this run's frame: set aside, never trusted
        frame = pd.read_parquet(path, page_checksum_verification=True)
        _check(frame, proto.metric_names(), n_lines)
        return frame

    if (frame := cache_store.read(cached, load, cache="item-score cache", then="rescoring")) is not None:
        return frame
    frame = _score(run)
    if len(frame) != n_lines:
        # The records scored are not the bytes hashed (the file changed between the reads: a run directory
        # replaced while a report read it): the frame is used once but never cached under that digest.
        log.warning("%s changed while it was read; its scores are not cached", path)
        return frame
    files.write_via(cached, lambda tmp: frame.to_parquet(tmp, index=False, write_page_checksum=True))
    return frame


def _check(frame: pd.DataFrame, metrics: list[str], n_rows: int) -> None:
    """Raise ``ValueError`` unless ``frame`` has ``_score``'s columns, ``n_rows`` rows and scores in [0, 1]."""
    expected = [*KEYS, "group", "included", "context_tokens", *metrics, JUDGE]
    if list(frame.columns) != expected:
        raise ValueError(f"columns {list(frame.columns)}, expected {expected}")
    if len(frame) != n_rows:
        raise ValueError(f"{len(frame)} rows for {n_rows} answers")
    values = frame[[*metrics, JUDGE]].to_numpy(dtype=float)
    if ((values < 0) | (values > 1)).any():  # NaN compares False: invalid or not judged is allowed
        raise ValueError("a score outside [0, 1]")
