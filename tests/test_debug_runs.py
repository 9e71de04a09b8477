"""Every method, experiment file and dataset runs end to end on the debug config (``+debug=default``).

The debug config is the tiny LoCoMo fixture and the model-free hash embedder, so these are real runs through
``allmem.run.runner.run`` (ingest, retrieve, pack, answer, score, seal the run directory) that take seconds. The
lists are globbed from ``configs/``: a method or an experiment file added later is run without editing this file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from allmem.run import files
from allmem.run.runner import run
from benchmarks import load_dataset

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
METHODS = sorted(p.stem for p in (CONFIGS / "method").glob("*.yaml"))
EXPERIMENTS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))


def _debug_run(overrides: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, object]:
    monkeypatch.chdir(REPO)  # the debug config names its fixture relative to the repository root
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                *overrides,
                "+debug=default",
                f"run.root={tmp_path}",
                f"paths.cache_dir={tmp_path / 'cache'}",
            ],
        )
    return run(cfg), cfg


def _check_complete(run_dir: Path, cfg) -> list[dict]:  # noqa: ANN001 - a composed DictConfig
    """A sealed run: one prediction per question asked, each within the budget and citing its own dialogue."""
    assert (run_dir / files.DONE).exists()
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    dialogues = load_dataset(cfg.dataset)  # the same questions, limits applied, whatever the dataset
    asked = {q.id for d in dialogues for q in d.questions}
    assert [r["question_id"] for r in records] == [q.id for d in dialogues for q in d.questions] and asked
    sources = {d.id: {t.source_id or t.id for t in d.turns()} for d in dialogues}
    for r in records:
        assert r["context_tokens"] <= cfg.budget.tokens
        assert set(r["ranked_source_ids"]) <= sources[r["dialogue_id"]], r["question_id"]
    metrics = json.loads((run_dir / files.METRICS).read_text())
    assert metrics["backend"]["offline"] is True and metrics["overall"]["judge"] is None
    return records


@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs_end_to_end(method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, cfg = _debug_run([f"method={method}"], tmp_path, monkeypatch)
    records = _check_complete(run_dir, cfg)
    assert cfg.embedder._target_ == "allmem.embed.HashEmbedder"  # the debug config really is model-free
    # Every method puts something in the context and ranks turns (full_history: most recent first).
    assert all(r["context_units"] > 0 for r in records)
    assert any(r["ranked_source_ids"] for r in records)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_file_runs_end_to_end(
    experiment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, cfg = _debug_run([f"+experiment={experiment}"], tmp_path, monkeypatch)
    _check_complete(run_dir, cfg)
    assert run_dir.is_relative_to(tmp_path)


@pytest.mark.parametrize("dataset", sorted(p.stem for p in (CONFIGS / "dataset").glob("*.yaml")))
def test_every_dataset_runs_end_to_end_with_allmem(
    dataset: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The debug config finds each dataset's tiny fixture; All-Mem with consolidation runs through on it."""
    run_dir, cfg = _debug_run([f"dataset={dataset}", "method=allmem"], tmp_path, monkeypatch)
    _check_complete(run_dir, cfg)
    assert cfg.dataset.path == f"tests/fixtures/{dataset}_tiny.json"
