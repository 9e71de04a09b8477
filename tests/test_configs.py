"""Every option of every config group composes and builds into the object the runner uses; every method,
experiment file and dataset also runs end to end on the debug config (``+debug=default``).

Options are found by walking ``configs/``, so an option or a group added later is covered without editing this
file. Override files (``experiment``, ``debug``: ``@package _global_``) are composed here and checked to set what
they say. The debug config is the dataset's tiny fixture and the model-free hash embedder, so the runs are real
runs through ``allmem.run.runner.run`` (ingest, retrieve, pack, answer, score, seal the run directory) that take
seconds. This is the one suite that runs every config.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from allmem import files
from allmem.build import build
from allmem.embed import HashEmbedder
from allmem.llm import build_llm
from allmem.run.runner import run
from benchmarks import load_dataset
from tests.runkit import compose, in_folder

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
FIXTURES = REPO / "tests" / "fixtures"
OVERRIDE_GROUPS = ("experiment", "debug")  # `+group=option` files that change the global config
# Groups whose every option runs end to end on the debug config, with these extra overrides. A run builds the
# method, so the method group has no builder below. Budget 300: every method's ranking is cut somewhere.
RUNS = {"method": ["budget.tokens=300"], "experiment": [], "dataset": ["method=allmem"]}
OPTIONS = sorted(
    ("/".join(p.relative_to(CONFIGS).parts[:-1]), p.stem)
    for p in CONFIGS.rglob("*.yaml")
    if len(p.relative_to(CONFIGS).parts) > 1 and p.relative_to(CONFIGS).parts[0] != "local"
)
# The example of a system living outside the repository's configs (docs/LIBRARY.md): its config folder joins
# Hydra's search path through ALLMEM_CONFIG_PATH, and it runs here like every other method.
EXAMPLE_CONFIGS = REPO / "examples" / "my_memory" / "configs"
EXAMPLES = sorted(("method", p.stem) for p in (EXAMPLE_CONFIGS / "method").glob("*.yaml"))


def _offline_llm(tmp: Path) -> Any:
    return build_llm(compose().llm, run_dir=tmp, cache_dir=tmp / "llm")


def _dataset(node: DictConfig, tmp: Path) -> None:
    fixture = FIXTURES / f"{node.name}_tiny.json"
    dialogues = load_dataset({**OmegaConf.to_container(node, resolve=True), "path": str(fixture)})
    assert dialogues and all(d.questions for d in dialogues), fixture


def _embedder(node: DictConfig, tmp: Path) -> None:
    emb = build(node, cache_dir=tmp / "embeddings")  # the real model loads lazily: never here
    assert int(emb.dim) > 0 and callable(emb.encode)


def _budget(node: DictConfig, tmp: Path) -> None:
    assert isinstance(node.tokens, int) and node.tokens > 0


def _protocol(node: DictConfig, tmp: Path) -> None:
    assert instantiate(node).name == node.name


def _llm(node: DictConfig, tmp: Path) -> None:
    llm = build_llm(node, run_dir=tmp, cache_dir=tmp / "llm")
    # the backend of the option's class, with the option's own backend name, model and settings
    assert type(llm.backend) is get_class(node._target_)
    desc = llm.describe()
    assert (desc["backend"], desc["model"]) == (node.get("label") or node.backend, node.model)
    assert desc["temperature"] == node.temperature and desc["dry_run"] is bool(node.get("dry_run", False))
    assert llm.max_concurrency == node.max_concurrency
    assert desc["cache"]["enabled"] is bool(node.cache.enabled)


def _generator(node: DictConfig, tmp: Path) -> None:
    generator = build(node, embedder=HashEmbedder(), llm=_offline_llm(tmp))
    assert type(generator) is get_class(node._target_)
    # every setting the option names reached the object (nested nodes are built objects of their own)
    plain = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if not isinstance(v, dict)}
    for key, value in plain.items():
        if key not in ("_target_", "name"):
            assert getattr(generator, key) == value, key


def _paths(node: DictConfig, tmp: Path) -> None:
    assert node.results and node.cache_dir


BUILDERS: dict[str, Callable[[DictConfig, Path], None]] = {
    "dataset": _dataset, "embedder": _embedder, "budget": _budget, "protocol": _protocol, "llm": _llm,
    "generator": _generator, "paths": _paths,
}  # fmt: skip


def test_every_group_has_options():
    groups = {g for g, _ in OPTIONS}
    assert set(BUILDERS) | set(OVERRIDE_GROUPS) | set(RUNS) <= groups, (
        "a known group lost its folder or options"
    )


@pytest.mark.parametrize(
    ("group", "option"), OPTIONS + EXAMPLES, ids=[f"{g}={o}" for g, o in OPTIONS + EXAMPLES]
)
def test_option_composes_builds_and_runs(
    group: str, option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if (group, option) in EXAMPLES:
        monkeypatch.setenv("ALLMEM_CONFIG_PATH", str(EXAMPLE_CONFIGS))
    if group in RUNS:
        override = f"+{group}={option}" if group in OVERRIDE_GROUPS else f"{group}={option}"
        if (group, option) == ("method", "http"):  # a memory service: the reference server over BM25
            from examples.memory_server import serving

            with serving("bm25") as url:
                _runs_end_to_end([override, f"method.url={url}", *RUNS[group]], tmp_path)
        else:
            _runs_end_to_end([override, *RUNS[group]], tmp_path)
    if group in OVERRIDE_GROUPS:
        cfg = compose(f"+{group}={option}", hydra=True)  # Hydra's node holds an experiment's sweep
        _sets_what_it_says(CONFIGS / group / f"{option}.yaml", cfg)
        return
    if group.startswith("hydra/"):  # Hydra's own groups (launchers, sweepers): their plugin must import
        node = OmegaConf.select(compose(f"{group}={option}", hydra=True), group.replace("/", "."))
        assert get_class(node._target_)
        return
    cfg = compose(f"{group}={option}")
    node = cfg[group]
    builder = BUILDERS.get(group)
    if builder is not None:
        builder(node, tmp_path)
    elif group not in RUNS:  # a group added later: at least its target must build from the config alone
        assert "_target_" in node, f"configs/{group}/{option}.yaml: no _target_ and no builder in this test"
        assert instantiate(node) is not None


def _runs_end_to_end(overrides: list[str], tmp: Path) -> None:
    """A sealed run of the debug config: one prediction per question asked, each within the budget, citing its
    own dialogue's turns once each; offline metrics in range; one stats line per dialogue."""
    cfg = compose(*overrides, "+debug=default", *in_folder(tmp))
    assert cfg.embedder._target_ == "allmem.embed.HashEmbedder"  # the debug config really is model-free
    assert Path(cfg.dataset.path) == FIXTURES / f"{cfg.dataset.name}_tiny.json"  # found from any folder
    run_dir = run(cfg)
    assert (run_dir / files.DONE).exists() and run_dir.is_relative_to(tmp)
    records = files.read_jsonl(run_dir / files.PREDICTIONS)
    dialogues = load_dataset(cfg.dataset)  # the same questions, limits applied, whatever the dataset
    at_end = [r for r in records if r.get("ask", "end") == "end"]  # ask=both: also after evidence
    assert [r["question_id"] for r in at_end] == [q.id for d in dialogues for q in d.questions] and records
    sources = {d.id: {t.source_id or t.id for t in d.turns()} for d in dialogues}
    for r in records:
        ranked = r["ranked_source_ids"]
        assert set(ranked) <= sources[r["dialogue_id"]] and len(set(ranked)) == len(ranked), r["question_id"]
        assert 0 < r["context_tokens"] <= cfg.budget.tokens and r["context_units"] >= 1, r["question_id"]
        assert isinstance(r["prediction"], str) and r["prediction"], r["question_id"]
    assert any(r["ranked_source_ids"] for r in records)  # full_history ranks too (most recent first)
    metrics = json.loads((run_dir / files.METRICS).read_text())
    assert metrics["backend"]["offline"] is True and metrics["overall"]["judge"] is None
    scores = metrics["overall"]["scores"]
    assert scores and all(0 <= v <= 100 for v in scores.values() if v is not None), scores
    stats = files.read_jsonl(run_dir / files.SYSTEM_STATS)
    assert [s["dialogue_id"] for s in stats] == [d.id for d in dialogues]


def _leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out |= _leaves(v, f"{prefix}{k}.")
        return out
    return {prefix[:-1]: node}


def _sets_what_it_says(path: Path, cfg: DictConfig) -> None:
    """Every value the override file writes is in the config composed with it and with Hydra's node (a later
    file did not undo it)."""
    own = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    assert isinstance(own, dict)
    own.pop("defaults", None)
    assert "hydra" in cfg, "compose with hydra=True: an experiment's sweep lives in the Hydra node"
    composed = _leaves(OmegaConf.to_container(cfg, resolve=False))
    expected = _leaves(own)
    assert expected, f"{path} changes nothing"
    for key, value in expected.items():
        assert composed.get(key) == value, f"{path}: {key} = {value!r}, composed {composed.get(key)!r}"


METHOD_OPTIONS = sorted(p.stem for p in (CONFIGS / "method").glob("*.yaml"))


@pytest.mark.parametrize("option", METHOD_OPTIONS)
def test_library_reads_the_same_method_node_as_a_run(option: str) -> None:
    """``allmem.defaults.method_node`` (OmegaConf only, for library code) gives what Hydra composes for a run."""
    from allmem.defaults import method_node

    composed = OmegaConf.to_container(compose(f"method={option}").method, resolve=True)
    assert method_node(option) == composed


def test_settings_are_built_strictly_from_their_node(tmp_path: Path) -> None:
    """No dataclass holds a default: a key missing from the node or one it does not know is one error naming both."""
    from allmem.defaults import from_node, paper
    from allmem.errors import ConfigError
    from allmem.memory.write import WriteConfig

    node = {"sem_threshold": 0.65, "sem_per_insert": 3, "batch_turns": 64, "embed_format": "paper", "typo": 1}
    with pytest.raises(ConfigError) as err:
        from_node(WriteConfig, node, "method.write")
    assert str(err.value).startswith(
        "unknown key(s) method.write.typo; missing key(s) method.write.describe_workers (its keys: "
    )
    assert paper(WriteConfig, batch_turns=8) == WriteConfig(0.65, 3, 8, "paper", 1)


def test_the_llm_reader_uses_the_fitted_reader_settings() -> None:
    """``generator=llm`` answers offline with the settings of ``configs/generator/extractive.yaml``, read from there."""
    llm_node = OmegaConf.to_container(compose().generator, resolve=True)
    extractive = OmegaConf.to_container(compose("generator=extractive").generator, resolve=True)
    assert llm_node["extractive"] == extractive


def _keyword_defaults(target: str) -> dict[str, object]:
    import importlib
    import inspect

    module, _, name = target.rpartition(".")
    params = inspect.signature(getattr(importlib.import_module(module), name)).parameters
    return {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}


@pytest.mark.parametrize("group, option", [("method", m) for m in METHOD_OPTIONS] + [("llm", "offline"), ("llm", "openai"), ("llm", "replay")])  # fmt: skip
def test_a_constructor_default_is_its_config_value(group: str, option: str) -> None:
    """Constructors keep keyword defaults so code can build a class without a config (docs/DESIGN.md, "Defaults
    have one home"); each one a config file sets must be the file's value, so the two cannot drift apart."""
    from allmem.defaults import method_node

    node = (
        method_node(option)
        if group == "method"
        else OmegaConf.to_container(OmegaConf.load(CONFIGS / group / f"{option}.yaml"))
    )
    target = node.get("_target_") or OmegaConf.load(CONFIGS / group / f"{option}.yaml").get("_target_")
    # a None default is "off" (no pacing when code builds a backend without a config); the file may turn it on
    defaults = {k: v for k, v in _keyword_defaults(str(target)).items() if v is not None}
    drift = {k: (v, node[k]) for k, v in defaults.items() if k in node and v != node[k]}
    assert drift == {}, f"configs/{group}/{option}.yaml: constructor default != file value: {drift}"
