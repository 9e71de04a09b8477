"""wandb.enabled=true logs a run's config, metrics and figures; offline mode needs no key (WANDB_MODE=offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from allmem.report.wandb_log import flat_metrics
from allmem.run.runner import run

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.slow  # the real embedding model
def test_offline_wandb_run_holds_config_metrics_and_figures(tmp_path, cache_dir, fixtures_dir, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    overrides = ["method=allmem", "atc.every_sessions=1", f"dataset.path={fixtures_dir / 'locomo_tiny.json'}",
                 f"run.root={tmp_path / 'runs'}", f"paths.cache_dir={cache_dir}", "run.progress=false",
                 "wandb.enabled=true", "wandb.mode=offline"]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    run_dir = run(cfg)
    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1, list((run_dir / "wandb").iterdir())
    # wandb >= 0.2x keeps an offline run's config, history and summary in one protobuf log (run-*.wandb) that
    # only its Go core reads back; its strings are stored verbatim, so the keys and values can be found in it.
    (log,) = offline[0].glob("run-*.wandb")
    blob = log.read_bytes()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    f1 = metrics["overall"]["scores"]["f1"]
    assert b"overall/f1" in blob, len(blob)
    assert json.dumps(f1).encode() in blob, (f1, len(blob))
    assert b"groups/2/f1" in blob and b"cost/write/tokens_in" in blob
    assert b'"theta"' in blob and b"allmem.memory.system.AllMem" in blob  # the resolved config
    media = offline[0] / "files" / "media"
    images = {p.name.split("_")[0] for p in media.glob("images/figures/*.png")}
    assert {"f1", "surface", "recoverability"} <= images
    (table,) = media.glob("table/per_question_*.table.json")
    assert len(json.loads(table.read_text())["data"]) == len(
        (run_dir / "predictions.jsonl").read_text().splitlines()
    )


@pytest.mark.slow  # the real embedding model
def test_disabled_by_default_writes_nothing(tmp_path, cache_dir, fixtures_dir):
    overrides = ["method=bm25", f"dataset.path={fixtures_dir / 'locomo_tiny.json'}", f"run.root={tmp_path}",
                 f"paths.cache_dir={cache_dir}", "run.progress=false"]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    assert cfg.wandb.enabled is False
    run_dir = run(cfg)
    assert not (run_dir / "wandb").exists()


def test_flat_metrics_keeps_numbers_only():
    metrics = {"overall": {"scores": {"f1": 50.0, "R@5": None}, "judge": None},
               "groups": {"2": {"scores": {"f1": 25.0}}}, "cost": {"write": {"calls": 3, "tokens_in": 10}}}  # fmt: skip
    assert flat_metrics(metrics) == {"overall/f1": 50.0, "groups/2/f1": 25.0, "cost/write/calls": 3.0,
                                     "cost/write/tokens_in": 10.0}  # fmt: skip
