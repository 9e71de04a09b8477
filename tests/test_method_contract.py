"""Every ``configs/method/*.yaml`` builds and runs a tiny dialogue through the runner: ingest, retrieve, budget,
answer, score. New methods are covered by adding their config; nothing here names one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from allmem.run import files
from allmem.run.runner import run

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
METHODS = sorted(p.stem for p in (CONFIGS / "method").glob("*.yaml"))
BUDGET = 300  # small enough that every method's ranking is cut somewhere on the tiny dialogues


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_method_runs_the_tiny_dialogues_end_to_end(method: str, tmp_path: Path, cache_dir: Path) -> None:
    tiny = REPO / "tests" / "fixtures" / "locomo_tiny.json"
    overrides = [
        f"method={method}", f"dataset.path={tiny}", f"run.root={tmp_path}", f"paths.cache_dir={cache_dir}",
        f"embedder.cache_dir={cache_dir / 'embeddings'}", "run.progress=false", f"budget.tokens={BUDGET}",
    ]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    run_dir = run(cfg)
    assert (run_dir / files.DONE).exists()

    raw = json.loads(tiny.read_text())
    turn_ids = {
        t["dia_id"] for d in raw for k, v in d["conversation"].items() if isinstance(v, list) for t in v
    }  # every id a method may return
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    assert len(records) == sum(len(d["qa"]) for d in raw)
    for r in records:
        assert r["ranked_source_ids"], f"{method}: retrieved nothing for {r['question_id']}"
        assert set(r["ranked_source_ids"]) <= turn_ids, f"{method}: unknown source ids"
        assert len(set(r["ranked_source_ids"])) == len(r["ranked_source_ids"])
        assert 0 < r["context_tokens"] <= BUDGET and r["context_units"] >= 1
        assert isinstance(r["prediction"], str) and r["prediction"]

    metrics = json.loads((run_dir / files.METRICS).read_text())
    scores = metrics["overall"]["scores"]
    assert 0 <= scores["f1"] <= 100 and 0 <= scores["R@5"] <= 100 and 0 <= scores["N@5"] <= 100
    assert metrics["backend"]["offline"] is True
    stats = files.read_jsonl(run_dir / files.SYSTEM_STATS)
    assert [s["dialogue_id"] for s in stats] == [d["sample_id"] for d in raw]
