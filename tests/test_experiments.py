"""Every point of every paper experiment composes, instantiates and answers on a tiny dialogue; the launchers
compose (the SLURM one is built, never submitted)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from hydra.utils import instantiate

from allmem.budget import pack
from allmem.build import build
from allmem.llm import build_llm
from allmem.report.targets import CONFIGS, ORDER, TARGETS, experiments_of, sweep_points
from allmem.run.pipeline import ingest
from allmem.systems import MemorySystem, Resources
from benchmarks import load_dataset
from tests.runkit import compose

EXPERIMENTS = sorted({e for t in TARGETS.values() for e in t.experiments})
POINTS = [
    (e, p) for e in EXPERIMENTS for p in sweep_points(e, use_cache=False)
]  # collection: no cache writes


def test_every_target_experiment_exists_and_the_order_names_only_them():
    for exp in EXPERIMENTS:
        assert (CONFIGS / "experiment" / f"{exp}.yaml").is_file(), exp
    assert set(ORDER) <= set(EXPERIMENTS), "targets.ORDER names an experiment no target runs"
    assert experiments_of(list(TARGETS))[0] == "table1"  # its banks first; the rest in ORDER, new ones after


@pytest.mark.slow  # the real embedding model
@pytest.mark.parametrize(("experiment", "point"), POINTS, ids=[f"{e}:{' '.join(p)}" for e, p in POINTS])
def test_point_instantiates_and_answers_on_a_tiny_dialogue(
    experiment, point, fixtures_dir, tmp_path, embedder
):
    dataset = _dataset_of(experiment)
    cfg = compose(f"+experiment={experiment}", f"dataset.path={fixtures_dir / f'{dataset}_tiny.json'}",
                    f"paths.cache_dir={tmp_path}", *point)  # fmt: skip
    for override in point:  # the sweep value reached the config
        key, value = override.split("=", 1)
        got = cfg.method.name if key == "method" else _select(cfg, key)
        assert str(got) == value, override
    dialogue = load_dataset(cfg.dataset)[0]
    llm = build_llm(cfg.llm, run_dir=tmp_path, cache_dir=tmp_path / "llm")
    system = build(cfg.method, resources=Resources(embedder=embedder, llm=llm, run_dir=tmp_path))
    assert isinstance(system, MemorySystem)
    ingest(system, dialogue, progress=False)
    question = dialogue.questions[0]
    result = system.retrieve(question.text, question.date)
    assert result.units, f"{experiment} {point}: nothing retrieved"
    assert pack(result.units, int(cfg.budget.tokens)).used_tokens <= int(cfg.budget.tokens)
    if cfg.method.name.startswith("allmem") and cfg.get("atc") is not None and cfg.atc.enabled:
        assert Path(cfg.run.bank_cache).is_relative_to(tmp_path), (
            "paper runs keep banks under paths.cache_dir"
        )
        assert int(cfg.run.probe_queries) > 0


@cache  # about 100 points over 15 experiments; a compose takes Hydra a quarter of a second
def _dataset_of(experiment: str) -> str:
    """The dataset an experiment file runs on: LoCoMo unless the file names its own."""
    return str(compose(f"+experiment={experiment}").dataset.name)


def _select(cfg, key: str):
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key)


def test_local_launcher_composes_with_n_jobs():
    cfg = compose("+experiment=fig3", "hydra/launcher=local", "hydra.launcher.n_jobs=3", hydra=True)
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher")
    assert cfg.hydra.launcher.n_jobs == 3


def test_slurm_launcher_composes_and_builds_without_submitting():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    cfg = compose("+experiment=fig3", "hydra/launcher=slurm", "hydra.launcher.partition=cpu", hydra=True)
    node = cfg.hydra.launcher
    assert node._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert node.partition == "cpu" and node.cpus_per_task >= 1 and node.timeout_min > 0
    assert any("OMP_NUM_THREADS=1" in line for line in node.setup)
    launcher = instantiate(node)  # builds the launcher object; submitting would need launcher.setup + launch
    assert type(launcher).__name__ == "SlurmLauncher"
