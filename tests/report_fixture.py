"""Hand-made run directories for the report tests and the notebook test (no model, no ingestion).

Each run is written under the config the summariser will look for (the experiment point composed by Hydra), with
predictions whose scores are known: a question is answered right (F1 = 1) or with an unrelated word (F1 = 0),
and its gold evidence is ranked first or not at all. ``correct(run_label, question_index)`` decides, so a test
can compute every mean, interval bound and paired p by hand.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from allmem import files
from allmem.fingerprint import source_fingerprint
from allmem.memory.atc.summary import summarise_events
from allmem.metrics import score_records
from allmem.report import targets
from allmem.report.targets import sweep_points
from allmem.run import identity


def _compose(overrides: Sequence[str]) -> DictConfig:
    """The composed config of ``overrides``, as the summariser composes it (once per process and config
    fingerprint: tests write the same experiments again and again)."""
    return targets._compose(overrides)


DIALOGUES = ("conv-26", "conv-44")  # one fit conversation, one held out
CATEGORIES = (1, 2, 4, 4)  # per dialogue, question i has category CATEGORIES[i]


def _records(correct: Callable[[int], bool], tokens: Callable[[int], int]) -> list[dict[str, Any]]:
    out = []
    i = 0
    for d in DIALOGUES:
        for j, cat in enumerate(CATEGORIES):
            right = correct(i)
            out.append({
                "question_id": f"{d}:q{j:04d}", "dialogue_id": d, "category": cat, "question": f"question {i}?",
                "prediction": f"answer{i}" if right else "zzz", "gold": f"answer{i}", "evidence": [f"D1:{i + 1}"],
                "ranked_source_ids": [f"D1:{i + 1}", "D9:9"] if right else ["D9:9"],
                "context_tokens": tokens(i), "dropped_tokens": 0, "context_units": 4,
                "latency_ms": {"embed": 1.0, "stage1": 0.5 + i, "stage2": 0.25, "stage3": 0.25, "retrieve": 2.0 + i,
                               "generate": 3.0, "pack": 0.1, "mem_lat": 2.0 + i},
            })  # fmt: skip
            i += 1
    return out


def _atc_events(theta: float) -> list[dict[str, Any]]:
    """Two consolidation runs per dialogue; a lower theta archives more (visible = turn - archived)."""
    archived_per_run = 1 if theta >= 0.9 else 3
    events = []
    for d in DIALOGUES:
        archived = 0
        for run, turn in ((1, 6), (2, 10)):
            archived += archived_per_run
            events.append({"kind": "diagnose", "dialogue": d, "run": run, "units": 5, "proposals": 4, "accepted": 2,
                           "failed": {}, "tokens": 500, "latency_ms": 100.0})  # fmt: skip
            events.append({"kind": "target", "dialogue": d, "run": run, "op": "merge", "state": "executed",
                           "tokens": 50, "latency_ms": 10.0})  # fmt: skip
            events.append({"kind": "target", "dialogue": d, "run": run, "op": "split", "state": "noop",
                           "tokens": 30, "latency_ms": 5.0})  # fmt: skip
            events.append({"kind": "run", "dialogue": d, "run": run, "turn": turn, "turns_since_last": 6 if run == 1 else 4,
                           "n_units": turn, "n_visible": turn - archived, "visible_before": turn,
                           "latency_ms": 500.0, "tokens": 580})  # fmt: skip
            events.append({"kind": "probe", "dialogue": d, "run": run, "turn": turn, "n_units": turn,
                           "n_visible": turn - archived, "k": 10, "queries": 4, "repeats": 5,
                           "stage1_full_ms": 0.01 * turn, "stage1_visible_ms": 0.01 * (turn - archived)})  # fmt: skip
    return events


def write_run(
    root: Path,
    overrides: Sequence[str],
    correct: Callable[[int], bool],
    tokens: Callable[[int], int] = lambda i: 200,
) -> Path:
    cfg = _compose(list(overrides))
    digest = identity.data_digest(cfg)
    path = (
        root
        / str(cfg.dataset.name)
        / f"{identity.run_label(cfg, overrides)}-{identity.config_hash(cfg, digest)}"
    )
    path.mkdir(parents=True)
    (path / files.CONFIG).write_text(OmegaConf.to_yaml(cfg, resolve=True))
    records = _records(correct, tokens)
    (path / files.PREDICTIONS).write_text("".join(json.dumps(r) + "\n" for r in records))
    atc = (
        cfg.get("atc") is not None
        and bool(cfg.atc.enabled)
        and str(cfg.method._target_).endswith("AllMemSystem")
    )
    events = _atc_events(float(cfg.atc.theta)) if atc else []
    if events:
        (path / "atc_events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    stats = []
    for d in DIALOGUES:
        row: dict[str, Any] = {"dialogue_id": d, "turns": 10, "ingest_s": 2.0, "end_stream_s": 1.0,
                               "n_units": 10, "n_visible": 10}  # fmt: skip
        if atc:
            runs = [e for e in events if e["kind"] == "run" and e["dialogue"] == d]
            row.update(n_visible=runs[-1]["n_visible"], n_units=runs[-1]["n_units"])
            row["n_archived"] = row["n_units"] - row["n_visible"]
            row["atc"] = summarise_events(
                e for e in events if e["dialogue"] == d
            )  # as the consolidator writes
            row["recoverability"] = {"n_archived": row["n_archived"], "unreachable_share": 0.0, "mode": "directed",
                                     "curve": {"0": 0.0, "1": 0.5, "2": 1.0, "3": 1.0}}  # fmt: skip
        stats.append(row)
    (path / files.SYSTEM_STATS).write_text("".join(json.dumps(s) + "\n" for s in stats))
    metrics = score_records(records, "allmem")
    metrics["run"] = {
        "label": identity.run_label(cfg, overrides),
        "config_hash": identity.config_hash(cfg, digest),
    }
    metrics["backend"] = {"llm": "offline", "llm_model": "offline", "offline": True}
    metrics["cost"] = {
        "write": {"tokens_in": 100, "tokens_out": 20},
        "generate": {"tokens_in": 8 * 300, "tokens_out": 8},
    }
    (path / files.METRICS).write_text(json.dumps(metrics))
    manifest = {"git": {"sha": "0123456789abcdef", "dirty": False}, "written_at": "2026-01-02T03:04:05+00:00",
                "backend": metrics["backend"], "data": {}, "code": source_fingerprint()}  # fmt: skip
    (path / files.MANIFEST).write_text(json.dumps(manifest))
    (path / files.DONE).write_text("complete\n")
    return path


def write_experiment(
    root: Path,
    experiment: str,
    correct: Callable[[str, int], bool],
    extra: Sequence[str] = (),
    skip: Sequence[str] = (),
) -> list[Path]:
    """A run for every point of ``experiment`` on LoCoMo, except the points labelled in ``skip`` (left missing)."""
    out = []
    for point in sweep_points(experiment):
        label = " ".join(point)
        if label in skip:
            continue
        overrides = [f"+experiment={experiment}", "dataset=locomo", *extra, *point]
        cfg = _compose(overrides)
        digest = identity.config_hash(cfg, identity.data_digest(cfg))
        if list((root / "locomo").glob(f"*-{digest}")):
            continue  # the same configuration is shared by several experiments
        out.append(write_run(root, overrides, lambda i, label=label: correct(label, i)))
    return out
