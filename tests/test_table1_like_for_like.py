"""Table 1's like-for-like footer: each row's search kind and fitted constants, read from its method config."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from allmem.defaults import CONFIG_DIR
from allmem.report.runs import Run
from allmem.report.tables.table1 import fitted_of, like_for_like_note, search_of


def _run(method: str, **override) -> Run:
    node = OmegaConf.load(CONFIG_DIR / "method" / f"{method}.yaml")
    node = node.method if "method" in node else node
    if "_target_" not in node:  # a variant that extends another config through ``defaults``
        node = OmegaConf.merge(
            _run(str(node.defaults[0])).cfg.method, {k: v for k, v in node.items() if k != "defaults"}
        )
    node = OmegaConf.merge(node, override)
    return Run(path=Path("."), cfg=OmegaConf.create({"method": node}), metrics={})


def test_search_kinds_come_from_each_class_and_allmem_stage1() -> None:
    kinds = {m: search_of(_run(m)) for m in ("naive_rag", "bm25", "hybrid_rag", "full_history", "mem0", "amem",
                                              "lightmem", "hipporag", "memgpt", "allmem")}  # fmt: skip
    assert kinds == {
        "naive_rag": "dense", "bm25": "lexical", "hybrid_rag": "dense+lexical", "full_history": "recency",
        "mem0": "dense", "amem": "dense", "lightmem": "dense", "hipporag": "dense+graph",
        "memgpt": "dense+lexical", "allmem": "dense+links",
    }  # fmt: skip
    assert search_of(_run("allmem", retrieval={"stage1": "fused"})) == "dense+lexical+links"


def test_fitted_rows_are_those_whose_config_names_the_fitting_script() -> None:
    # bm25 and hybrid_rag by scripts/fit_retrieval.py, mem0's offline roles by scripts/fit_baselines.py
    assert [m for m in ("naive_rag", "bm25", "hybrid_rag", "mem0", "allmem") if fitted_of(_run(m))] == [
        "bm25",
        "hybrid_rag",
        "mem0",
    ]
    note = like_for_like_note([_run("naive_rag"), _run("mem0"), _run("bm25")])
    assert "dense: `naive_rag`, `mem0`" in note and "lexical: `bm25`" in note
    assert "offline roles): `mem0`, `bm25`." in note
