"""Fit the constants of the published baselines' offline roles on the fit conversations only (issue 22).

Offline, every LLM role of Mem0, A-Mem, HippoRAG 2 and MemGPT is a deterministic rule, and a rule has constants
(a cosine threshold, a word count) that no paper gives. All-Mem's constants were fitted on LoCoMo's fit
conversations (``benchmarks.fit_split``) by ``scripts/fit_retrieval.py``; the baselines' offline constants get the same
treatment, on the same five conversations, with the same objective (the mean of R@5 and N@5, protocol ``allmem``,
every question), the same search (greedy coordinate ascent, ``fit_retrieval.coordinate_search``) and at most as
many evaluated configurations as ``fit_retrieval.py`` may spend on ``allmem_hybrid`` (both counts are printed).
The upstream constants (top-k, thresholds of the published code) are not searched: they stay as their authors
set them. LightMem's offline roles have no free constant (its compression rate, buffers and thresholds are
upstream's), so it has nothing to fit.

Every trial builds the systems from ``configs/method/<method>.yaml`` with the trial's values as overrides and
feeds each fit conversation's stream as ``allmem run`` does; only the reader is skipped (it does not change R@k).
The held-out five are scored once at the end, for the chosen values only, for information: nothing is chosen on
them. The chosen values are printed, to be written into the configs.

    .venv/bin/python scripts/fit_baselines.py                       # all four: about 25 minutes on 2 busy cores
    .venv/bin/python scripts/fit_baselines.py --only hipporag --rounds 1
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fit_retrieval as fr  # noqa: E402  (the fit split, the systems, the scorer and the search are shared)

# The offline roles' constants and the values tried (the config's value is the start, and is among them).
GRIDS: dict[str, dict[str, Sequence[Any]]] = {
    "mem0": {"same_cos": (0.9, 0.95, 0.98), "related_cos": (0.6, 0.7, 0.8, 0.9)},
    "amem": {
        "evolve_cos": (0.5, 0.6, 0.7, 0.8, 0.9, 1.1),  # 1.1: never links (a cosine is at most 1)
        "context_words": (20, 40, 60, 100),
        "min_keywords": (2, 3, 5),
    },
    "hipporag": {
        "max_entities": (1, 2, 3, 4, 6, 8, 12),
        "relation_words": (0, 2, 3, 5, 8, 12),
        "filter_min_overlap": (0, 1, 2),
    },
    "memgpt": {
        "archive_min_terms": (0, 2, 3, 5, 8),
        "search_pages": (1, 2, 3, 4),
        "search_terms": (0, 1, 3, 5),
    },
}


def allmem_budget(rounds: int = 3) -> int:
    """How many configurations ``fit_retrieval.py`` may evaluate for ``allmem_hybrid`` (its default rounds): the
    start, then per round every grid value but the current one of every key."""
    per_round = sum(len(values) - 1 for values in fr.VARIANT_GRID.values())
    return 1 + rounds * per_round


def fit_method(
    method: str, dialogues: Sequence[Any], fit: Sequence[str], embedder: Any, rounds: int
) -> tuple[dict, int]:
    """Coordinate ascent over ``GRIDS[method]`` from the config's values; returns (chosen values, configs evaluated)."""
    fit_dialogues = [d for d in dialogues if d.id in fit]
    start_cfg = fr.compose(method).method
    start = {k: start_cfg[k] for k in GRIDS[method]}
    seen: dict[tuple, float] = {}

    def objective(p: Mapping[str, Any]) -> float:
        key = tuple(sorted(p.items()))
        if key not in seen:
            t0 = time.perf_counter()
            systems = fr.build_systems(method, fit_dialogues, embedder, overrides(p))
            res = fr.score(systems, fit_dialogues, fit)
            seen[key] = res["obj"]
            print(
                f"[{method}] {dict(p)}: R@5 {res['R@5']:.2f} N@5 {res['N@5']:.2f} -> {res['obj']:.2f} "
                f"({time.perf_counter() - t0:.0f}s)",
                flush=True,
            )
        return seen[key]

    best, _ = fr.coordinate_search(start, GRIDS[method], objective, rounds, method)
    return best, len(seen)


def overrides(p: Mapping[str, Any]) -> list[str]:
    return [f"method.{k}={v}" for k, v in p.items()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="LoCoMo file (default: data/locomo or ../shared/data/locomo)")
    ap.add_argument("--only", nargs="+", default=list(GRIDS), choices=list(GRIDS))
    ap.add_argument("--rounds", type=int, default=2, help="coordinate-ascent rounds per method")
    ap.add_argument("--no-heldout", action="store_true", help="skip the held-out scores printed at the end")
    args = ap.parse_args(argv)

    import torch

    from allmem.build import build_embedder
    from benchmarks import fit_split

    torch.set_num_threads(1)
    fit = fit_split("locomo")
    dialogues = fr.load_dialogues(args.data)
    held = [d.id for d in dialogues if d.id not in fit]
    embedder = build_embedder(fr.compose("naive_rag"))
    budget = allmem_budget()
    print(f"fit on {', '.join(fit)}; held out (scored for information only): {', '.join(held)}")
    print(f"budget: fit_retrieval.py may evaluate up to {budget} configurations for allmem_hybrid (3 rounds)")
    chosen: dict[str, tuple[dict, int]] = {}
    for method in args.only:
        t0 = time.perf_counter()
        chosen[method] = fit_method(method, dialogues, fit, embedder, args.rounds)
        print(f"[{method}] {chosen[method][1]} configurations in {time.perf_counter() - t0:.0f}s", flush=True)

    print(f"\n# chosen on {', '.join(fit)}")
    for method, (best, n) in chosen.items():
        values = ", ".join(f"{k}: {v}" for k, v in best.items())
        print(
            f"configs/method/{method}.yaml: {values}   ({n} configurations evaluated; allmem_hybrid's budget {budget})"
        )
    if not args.no_heldout:
        held_dialogues = [d for d in dialogues if d.id in held]
        for method, (best, _) in chosen.items():
            res = fr.score(
                fr.build_systems(method, held_dialogues, embedder, overrides(best)), held_dialogues, held
            )
            print(
                f"held out, for information: {method} R@5 {res['R@5']:.2f} N@5 {res['N@5']:.2f} (n={res['n']})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
