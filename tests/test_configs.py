"""Every option of every config group composes, and every buildable one instantiates (STYLE.md practice 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_object

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
GROUPS = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir() and p.name not in ("local", "experiment"))
OPTIONS = [(g, f.stem) for g in GROUPS for f in sorted((CONFIGS / g).glob("*.yaml"))]


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def test_every_group_has_options():
    for group in ("dataset", "method", "embedder", "budget", "protocol", "llm", "generator", "paths"):
        assert (CONFIGS / group).is_dir() and list((CONFIGS / group).glob("*.yaml")), group


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_option_composes_and_target_imports(group, option):
    cfg = _compose([f"{group}={option}"])
    node = cfg[group]
    if "_target_" in node:
        assert callable(get_object(node._target_))
    if group == "method":
        assert node.name, "every method names itself (run directories and tables use it)"


@pytest.mark.parametrize("path", sorted((CONFIGS / "experiment").glob("*.yaml")), ids=lambda p: p.stem)
def test_experiment_files_compose(path):
    cfg = _compose([f"+experiment={path.stem}"])
    assert cfg.method.name


def test_method_instantiates_with_resources(embedder, tmp_path):
    """Every method builds from its config with the shared resources only."""
    from allmem.llm import build_llm
    from allmem.runner import build
    from allmem.systems import MemorySystem, Resources

    for option in sorted(f.stem for f in (CONFIGS / "method").glob("*.yaml")):
        cfg = _compose([f"method={option}", f"paths.cache_dir={tmp_path}"])
        llm = build_llm(cfg.llm, run_dir=tmp_path, cache_dir=tmp_path / "llm")
        system = build(cfg.method, resources=Resources(embedder=embedder, llm=llm, run_dir=tmp_path))
        assert isinstance(system, MemorySystem), option
