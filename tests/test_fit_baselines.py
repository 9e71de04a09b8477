"""scripts/fit_baselines.py: its grids name real offline constants, start at the configs' values, and its budget
is fit_retrieval.py's, counted by hand."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

import pytest
import yaml
from hydra.utils import get_class

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "scripts"))


fb = _script("fit_baselines")


def test_the_budget_is_what_fit_retrieval_may_spend_on_allmem_hybrid() -> None:
    # by hand from VARIANT_GRID: per round every value but the current one of each key:
    # fuse_weight 8, query_max_df 4, date_weight 6, bm25_field 1, bm25_k1 7, bm25_b 8, nb_* 5 x 8, back_temporal 8,
    # directions 1, priority 3, k 4, L 3, H 2, fuse_depth 3 = 98; three rounds after the start
    assert fb.allmem_budget(3) == 1 + 3 * 98 == 295


@pytest.mark.parametrize("method", sorted(fb.GRIDS))
def test_each_grid_searches_constructor_constants_from_the_configs_value(method: str) -> None:
    cfg = yaml.safe_load((ROOT / "configs" / "method" / f"{method}.yaml").read_text(encoding="utf-8"))
    params = inspect.signature(get_class(cfg["_target_"])).parameters
    for key, values in fb.GRIDS[method].items():
        assert key in params, f"{method}: {key} is not a constructor argument"
        assert cfg[key] in values, (
            f"{method}: the config's {key} ({cfg[key]}) is not among the values searched"
        )
    # the worst case of the search itself stays inside the budget
    per_round = sum(len(v) - 1 for v in fb.GRIDS[method].values())
    assert 1 + 2 * per_round <= fb.allmem_budget()
