"""Report tables from hand-made run directories: values checked by hand."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from allmem import files
from allmem.report import build_report
from allmem.report.tables import find_runs, fmt
from allmem.report.tables.atc import atc_cost, pooled_recoverability


def _record(qid: str, dialogue: str, category: int, prediction: str, gold: str, ranked: list[str]) -> dict:
    return {"question_id": qid, "dialogue_id": dialogue, "category": category, "question": "?",
            "prediction": prediction, "gold": gold, "evidence": ["D1:1"], "ranked_source_ids": ranked}  # fmt: skip


def _fake_run(root: Path, method: str, records: list[dict], stats: list[dict]) -> Path:
    from allmem.metrics import score_records

    path = root / method
    path.mkdir(parents=True)
    cfg = {"method": {"name": method}, "dataset": {"name": "locomo"}, "protocol": {"name": "allmem"}}
    (path / files.CONFIG).write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
    (path / files.PREDICTIONS).write_text("".join(json.dumps(r) + "\n" for r in records))
    (path / files.SYSTEM_STATS).write_text("".join(json.dumps(s) + "\n" for s in stats))
    metrics = score_records(records, "allmem")
    metrics["backend"] = {"offline": True, "llm": "offline"}
    (path / files.METRICS).write_text(json.dumps(metrics))
    (path / files.DONE).write_text("complete\n")
    return path


def _stats(dialogue: str, n_archived: int, curve: dict[str, float], table3: dict, table2: dict) -> dict:
    return {"dialogue_id": dialogue, "turns": 10, "n_units": 11, "n_visible": 8, "n_archived": n_archived,
            "recoverability": {"n_archived": n_archived, "unreachable_share": 1 - curve["10"], "curve": curve,
                               "mode": "directed"},
            "atc": {"table3": table3, "table2": table2}}  # fmt: skip


def test_pooled_recoverability_weights_dialogues_by_archived_units(tmp_path):
    # conv-26: 1 archived unit at h=1; conv-44: 3 archived, one at h=1, one at h=3, one unreachable.
    # Pooled R(1) = (1 + 1) / 4 = 0.5, R(2) = 0.5, R(3) = 3/4; unreachable 1/4; median h = 1 (R(1) >= 0.5);
    # H_0.95 never reached (R tops out at 0.75) -> None.
    stats = [
        _stats("conv-26", 1, {"1": 1.0, "2": 1.0, "3": 1.0, "10": 1.0}, {}, {}),
        _stats("conv-44", 3, {"1": 1 / 3, "2": 1 / 3, "3": 2 / 3, "10": 2 / 3}, {}, {}),
    ]
    run_dir = _fake_run(tmp_path, "allmem", [_record("q1", "conv-26", 4, "a", "a", ["D1:1"])], stats)
    (run,) = find_runs(tmp_path)
    assert run.path == run_dir
    rec = pooled_recoverability(run)
    assert rec["n_archived"] == 4
    assert abs(rec["unreachable_share"] - 0.25) < 1e-12
    assert abs(rec["curve"][1] - 0.5) < 1e-12 and abs(rec["curve"][3] - 0.75) < 1e-12
    assert rec["median_h"] == 1 and rec["h95"] is None


def test_atc_cost_sums_dialogues_then_divides(tmp_path):
    # Merge: 2 + 1 events, 100 + 50 tokens -> 150 / 3 = 50 tokens per event.
    # Table 2: 2 + 1 runs, 600 + 300 tokens over 10 + 20 turns -> 300 tokens/event, 30 tokens/turn.
    t3a = {"merge": {"events": 2, "executed": 1, "skipped": 1, "noop": 0, "tokens": 100, "latency_ms": 20.0,
                     "tokens_per_event": 50.0}}  # fmt: skip
    t3b = {"merge": {"events": 1, "executed": 1, "skipped": 0, "noop": 0, "tokens": 50, "latency_ms": 10.0}}
    stats = [
        _stats("conv-26", 0, {"10": 1.0}, t3a, {"runs": 2, "tokens": 600, "turns": 10, "latency_ms": 2000.0}),
        _stats("conv-30", 0, {"10": 1.0}, t3b, {"runs": 1, "tokens": 300, "turns": 20, "latency_ms": 1000.0}),
    ]
    _fake_run(tmp_path, "allmem", [_record("q1", "conv-26", 4, "a", "a", ["D1:1"])], stats)
    (run,) = find_runs(tmp_path)
    cost = atc_cost(run)
    merge = cost["table3"]["merge"]
    assert merge["events"] == 3 and merge["executed"] == 2 and merge["skipped"] == 1
    assert merge["tokens_per_event"] == 50.0 and merge["latency_ms_per_event"] == 10.0
    assert cost["table2"]["tokens_per_event"] == 300.0
    assert cost["table2"]["tokens_per_turn"] == 30.0
    assert cost["table2"]["latency_s_per_turn"] == 0.1


def test_report_main_and_split_tables(tmp_path):
    # bm25: conv-26 (fit) answered right (F1 100), conv-44 (held out) wrong (F1 0): all = 50.
    records = [
        _record("conv-26:q0", "conv-26", 4, "blue", "blue", ["D1:1"]),
        _record("conv-44:q0", "conv-44", 4, "red", "blue", ["D9:9"]),
    ]
    _fake_run(tmp_path, "bm25", records, [])
    text = build_report(tmp_path)
    assert "| bm25 | 50.00 |" in text  # main table starts with F1
    assert "| bm25 | 50.00 | 100.00 | 0.00 |" in text  # split table: all, fit, held-out F1
    assert "n/a" in text  # 4o-J is not available offline
    assert "Visible surface" not in text  # no consolidation stats in this run


def test_fmt_rounds_for_display_only():
    assert fmt(None) == "n/a" and fmt(1 / 3) == "0.33" and fmt(7) == "7"


def test_figures_are_drawn_from_run_directories(tmp_path):
    stats = [_stats("conv-26", 2, {"1": 0.5, "2": 1.0, "10": 1.0}, {}, {})]
    _fake_run(tmp_path / "runs", "allmem", [_record("q1", "conv-26", 4, "a", "a", ["D1:1"])], stats)
    from allmem.report.figures import write_figures

    paths = write_figures(find_runs(tmp_path / "runs"), tmp_path / "fig")
    assert sorted(p.name for p in paths) == [
        "locomo_f1_by_group.png",
        "locomo_recoverability.png",
        "locomo_surface.png",
    ]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
