"""docs/DESIGN.md states facts that code and configs can change under it: each is read here from the doc and from
the code, so a change to one fails until the other follows. Left to the tests of their own passages: the record
version (`allmem.types.RECORD_VERSION`) and the run-file module and its line count (being moved, issue 33)."""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import OmegaConf

from allmem.defaults import method_node
from allmem.llm import build_llm
from allmem.memory.system import AllMemSystem

REPO = Path(__file__).resolve().parents[1]
DESIGN = " ".join((REPO / "docs" / "DESIGN.md").read_text(encoding="utf-8").split())  # wrapped lines joined
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4}


def _stated(pattern: str) -> tuple[str, ...]:
    found = re.search(pattern, DESIGN)
    assert found, f"docs/DESIGN.md no longer states /{pattern}/: update the doc or this test"
    return found.groups()


def _number(text: str) -> float:
    return float(WORDS.get(text, text))


def test_build_llm_fallbacks_are_the_ones_stated(tmp_path):
    temperature, in_flight, breaker, votes = _stated(
        r"neutral fallbacks \(temperature ([\d.]+), (\w+) calls in flight, the breaker after (\w+) failures, "
        r"cache and judge on, (\w+) votes?\)"
    )
    llm = build_llm(
        {"_target_": "allmem.llm.offline.OfflineBackend", "backend": "offline"}, cache_dir=tmp_path
    )
    assert llm.temperature == _number(temperature)
    assert llm.max_concurrency == _number(in_flight)
    assert llm.breaker_after == _number(breaker)
    assert llm.judge_votes == _number(votes)
    assert llm.cache.enabled and llm.judge_enabled


def test_every_llm_config_sets_the_keys_the_fallbacks_stand_for():
    """The doc: every `configs/llm/*.yaml` sets each of these keys (`breaker_after` only where it can fail)."""
    _stated(r"every `configs/llm/\*\.yaml` sets each of these keys \(`breaker_after` only where")
    for path in sorted((REPO / "configs" / "llm").glob("*.yaml")):
        cfg = OmegaConf.to_container(OmegaConf.load(path))
        assert {"temperature", "max_concurrency", "cache", "judge"} <= set(cfg), path.name
        assert {"enabled", "n_votes"} <= set(cfg["judge"]) and "enabled" in cfg["cache"], path.name


def test_write_batch_is_the_one_stated():
    (batch,) = _stated(r"up to `write\.batch_turns`, (\d+)\)")
    assert method_node("allmem")["write"]["batch_turns"] == int(batch)


def test_upstream_temperatures_are_the_ones_stated():
    default, mem0, amem = _stated(
        r"config's `temperature` \(([\d.]+)\) unless their method config states its upstream value "
        r"\(`method\.temperature`: Mem0 ([\d.]+), A-Mem ([\d.]+);"
    )
    for path in sorted((REPO / "configs" / "llm").glob("*.yaml")):
        assert float(OmegaConf.load(path).temperature) == float(default), path.name
    assert float(method_node("mem0")["temperature"]) == float(mem0)
    assert float(method_node("amem")["temperature"]) == float(amem)


def test_the_method_class_named_is_the_one_the_config_builds():
    (call,) = _stated(r"`(\w+)\.from_config\(resources, retrieval=\{\"K\": 8\}\)` builds the method")
    assert call == AllMemSystem.__name__
    assert method_node("allmem")["_target_"] == f"{AllMemSystem.__module__}.{AllMemSystem.__name__}"
