"""wandb.enabled=true logs a sealed run's config, metrics and figures, after DONE (``allmem run`` does it, never
the runner); offline mode needs no key (WANDB_MODE=offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from allmem import files
from allmem.report.wandb_log import flat_metrics
from allmem.run.runner import run
from tests.faultkit import FIXTURES, allmem_run, done_dir, env, run_dirs
from tests.runkit import compose, in_folder


@pytest.mark.slow  # the CLI in a subprocess
def test_a_wandb_failure_after_sealing_leaves_a_complete_run(tmp_path: Path) -> None:
    """W&B logs after ``DONE``: before, the runner logged first, so a W&B error (here an unknown mode) left the
    finished run unsealed (no ``DONE``) with a traceback."""
    res = allmem_run(tmp_path, "method=bm25", f"dataset.path={FIXTURES / 'locomo_tiny.json'}",
                     "wandb.enabled=true", "wandb.mode=bogus")  # fmt: skip
    assert res.rc == 1 and "Traceback" not in res.err, res.err
    assert (
        res.last_line().startswith("allmem run: error: wandb: ") and "the run itself is complete" in res.err
    )
    (run_dir,) = run_dirs(tmp_path)
    assert (run_dir / files.DONE).read_text() == "complete\n"


@pytest.mark.slow  # the CLI in a subprocess
def test_wandb_offline_logs_the_sealed_run_once(tmp_path: Path) -> None:
    """``wandb.enabled=true`` (offline mode, no key) logs the run's config, metrics and figures from its files
    into ``<run dir>/wandb/``; rerunning the complete run does not log it again."""
    wandb_env = env(WANDB_MODE="offline", WANDB_DIR=str(tmp_path), WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"),
                    WANDB_CACHE_DIR=str(tmp_path / "wandb-cache"))  # fmt: skip
    args = ("method=allmem", "atc.every_sessions=1", f"dataset.path={FIXTURES / 'locomo_tiny.json'}",
            "wandb.enabled=true", "wandb.mode=offline")  # fmt: skip
    res = allmem_run(tmp_path, *args, environ=wandb_env)
    run_dir = done_dir(res)
    (offline,) = sorted((run_dir / "wandb").glob("offline-run-*"))
    # wandb >= 0.2x keeps an offline run's config, history and summary in one protobuf log (run-*.wandb) that
    # only its Go core reads back; its strings are stored verbatim, so the keys and values can be found in it.
    (log,) = offline.glob("run-*.wandb")
    blob = log.read_bytes()
    f1 = json.loads((run_dir / files.METRICS).read_text())["overall"]["scores"]["f1"]
    assert b"overall/f1" in blob and json.dumps(f1).encode() in blob, (f1, len(blob))
    assert b"groups/2/f1" in blob and b"cost/write/tokens_in" in blob
    assert b'"theta"' in blob and b"allmem.memory.system.AllMemSystem" in blob  # the resolved config
    media = offline / "files" / "media"
    assert {p.name.split("_")[0] for p in media.glob("images/figures/*.png")} >= {
        "f1",
        "surface",
        "recoverability",
    }
    (table,) = media.glob("table/per_question_*.table.json")
    n_predictions = len((run_dir / files.PREDICTIONS).read_text().splitlines())
    assert len(json.loads(table.read_text())["data"]) == n_predictions
    again = allmem_run(tmp_path, *args, environ=wandb_env)
    assert again.rc == 0 and "skip (complete)" in again.out, again.err
    assert len(list((run_dir / "wandb").glob("offline-run-*"))) == 1


@pytest.mark.slow  # the real embedding model
def test_disabled_by_default_writes_nothing(tmp_path, cache_dir, fixtures_dir):
    cfg = compose("method=bm25", f"dataset.path={fixtures_dir / 'locomo_tiny.json'}", *in_folder(tmp_path, cache_dir),
                  "run.progress=false")  # fmt: skip
    assert cfg.wandb.enabled is False
    run_dir = run(cfg)
    assert not (run_dir / "wandb").exists()


def test_flat_metrics_keeps_numbers_only():
    metrics = {"overall": {"scores": {"f1": 50.0, "R@5": None}, "judge": None},
               "groups": {"2": {"scores": {"f1": 25.0}}}, "cost": {"write": {"calls": 3, "tokens_in": 10}}}  # fmt: skip
    assert flat_metrics(metrics) == {"overall/f1": 50.0, "groups/2/f1": 25.0, "cost/write/calls": 3.0,
                                     "cost/write/tokens_in": 10.0}  # fmt: skip
