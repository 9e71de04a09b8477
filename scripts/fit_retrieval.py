"""Fit the retrieval constants of ``bm25``, ``hybrid_rag`` and ``allmem_hybrid`` on the fit conversations only.

Every constant is chosen on LoCoMo's fit conversations (``benchmarks.fit_split``) by maximising the mean of
R@5 and N@5 (protocol ``allmem``, every question) there; the search is printed step by step, then the chosen
values, to be written into ``configs/method/{bm25,hybrid_rag,allmem_hybrid}.yaml``. The held-out five are
scored only at the end, for information: nothing is chosen on them.

Retrieval runs exactly as in ``allmem run``: the same systems, built from the same configs, retrieve through the
same code, and R@5 / N@5 come from ``allmem.metrics.retrieval`` on ``rank_source_ids`` of the returned units.
Only the reader is skipped (it does not change R@k / N@k), so a search step takes seconds, not minutes.

    .venv/bin/python scripts/fit_retrieval.py                 # all three: about an hour on 2 shared cores
    .venv/bin/python scripts/fit_retrieval.py --only bm25 hybrid_rag          # the baselines: a few minutes
    .venv/bin/python scripts/fit_retrieval.py --only allmem_hybrid --rounds 3

The variant's search starts from the values in configs/method/allmem_hybrid.yaml and moves one key at a time
over ``VARIANT_GRID`` (a move is kept only when it raises the objective), so a rerun from the written values
confirms them rather than searching again from scratch. The ablation table comes from runner runs of the
``allmem_hybrid_no*`` configs (docs/REPRODUCE.md, "Benchmarks and ablations").
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
Objective = Callable[[Mapping[str, Any]], float]


# ---------------------------------------------------------------------------------------------------- setup
def compose(method: str, overrides: Sequence[str] = ()) -> Any:
    """The run configuration ``allmem run dataset=locomo method=<method> <overrides>`` would use."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return hydra_compose("config", overrides=["dataset=locomo", f"method={method}", *overrides])


def load_dialogues(data: str | None) -> list[Any]:
    from allmem.paths import resolve_data_path
    from benchmarks.locomo import load_locomo

    return load_locomo(resolve_data_path("locomo", data))


def build_systems(
    method: str, dialogues: Sequence[Any], embedder: Any, overrides: Sequence[str] = ()
) -> dict:
    """One system per dialogue, each fed its whole stream, as the runner feeds it."""
    from allmem.build import build, build_run_llm
    from allmem.run.pipeline import ingest
    from allmem.systems import Resources

    cfg = compose(method, overrides)
    out = {}
    tmp = Path(tempfile.mkdtemp(prefix="fit_retrieval_"))
    llm = build_run_llm(cfg, tmp)
    for d in dialogues:
        t0 = time.perf_counter()
        system = build(cfg.method, resources=Resources(embedder=embedder, llm=llm, run_dir=tmp))
        ingest(system, d, progress=False)
        out[d.id] = system
        print(f"[fit] built {method} for {d.id} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return out


# ---------------------------------------------------------------------------------------------------- scoring
def score(systems: Mapping[str, Any], dialogues: Sequence[Any], ids: Iterable[str]) -> dict[str, float]:
    """Mean R@5 / N@5 (protocol allmem: every question) of ``systems`` over the dialogues ``ids``."""
    from allmem.metrics.retrieval import allmem_retrieval, rank_source_ids

    wanted = set(ids)
    rows = []
    for d in dialogues:
        if d.id not in wanted:
            continue
        system = systems[d.id]
        for q in d.questions:
            ranked = rank_source_ids(system.retrieve(q.text, q.date).units)
            rows.append(allmem_retrieval(ranked, q.evidence, (5,)))
    r5 = 100 * float(np.mean([r["R@5"] for r in rows]))
    n5 = 100 * float(np.mean([r["N@5"] for r in rows]))
    return {"R@5": r5, "N@5": n5, "obj": (r5 + n5) / 2, "n": len(rows)}


def set_retrieval(systems: Mapping[str, Any], cfg: Any) -> None:
    """Give every All-Mem system a fresh retriever with ``cfg`` (a RetrievalConfig) over its existing bank."""
    from allmem.memory.retrieve import Retriever

    for system in systems.values():
        system.retrieval_cfg = cfg
        system._retriever = Retriever(system.bank, system.resources.embedder, cfg, system.vector_cfg)


def coordinate_search(
    start: dict[str, Any], grid: Mapping[str, Sequence[Any]], objective: Objective, rounds: int, label: str
) -> tuple[dict[str, Any], float]:
    """Greedy coordinate ascent over ``grid``, printing every trial; ties keep the current value."""
    best = dict(start)
    best_obj = objective(best)
    print(f"[{label}] start {best} -> {best_obj:.2f}")
    for r in range(rounds):
        improved = False
        for key, values in grid.items():
            for v in values:
                if best.get(key) == v:
                    continue
                trial = {**best, key: v}
                obj = objective(trial)
                mark = ""
                if obj > best_obj + 1e-9:
                    best, best_obj, improved, mark = trial, obj, True, "  *"
                print(f"[{label}] round {r + 1} {key}={v!r}: {obj:.2f}{mark}")
        if not improved:
            break
    print(f"[{label}] chosen {best} -> {best_obj:.2f}")
    return best, best_obj


# ---------------------------------------------------------------------------------------------------- baselines
def turn_systems(factory: Callable[[], Any], dialogues: Sequence[Any]) -> dict[str, Any]:
    """A turn-level baseline per dialogue, fed the dialogue's turns as the runner feeds them."""
    from allmem.run.pipeline import ingest

    out = {}
    for d in dialogues:
        system = factory()
        ingest(system, d, progress=False)
        out[d.id] = system
    return out


def fit_bm25(dialogues: Sequence[Any], fit: Sequence[str]) -> dict[str, float]:
    """Grid over Lucene k1 and b for the turn-level ``bm25`` baseline."""
    from baselines.bm25 import BM25

    fit_dialogues = [d for d in dialogues if d.id in fit]
    best, best_obj = {}, -1.0
    for k1, b in itertools.product(BM25_K1, BM25_B):
        res = score(
            turn_systems(lambda k1=k1, b=b: BM25(k=50, k1=k1, b=b), fit_dialogues), fit_dialogues, fit
        )
        mark = ""
        if res["obj"] > best_obj + 1e-9:
            best, best_obj, mark = {"k1": k1, "b": b}, res["obj"], "  *"
        print(f"[bm25] k1={k1} b={b}: R@5 {res['R@5']:.2f} N@5 {res['N@5']:.2f} -> {res['obj']:.2f}{mark}")
    print(f"[bm25] chosen {best} -> {best_obj:.2f}")
    return best


def fit_hybrid_rag(
    dialogues: Sequence[Any], fit: Sequence[str], embedder: Any, bm25: Mapping[str, float]
) -> dict:
    """The fusion weight of ``hybrid_rag``, then k1 and b again beside it (starting from ``bm25``'s)."""
    from allmem.systems import Resources
    from baselines.bm25 import TurnBM25
    from baselines.hybrid_rag import HybridRAG

    fit_dialogues = [d for d in dialogues if d.id in fit]
    systems = turn_systems(
        lambda: HybridRAG(k=50, weight=0.5, resources=Resources(embedder=embedder), **bm25), fit_dialogues
    )

    def objective(p: Mapping[str, Any]) -> float:
        for s in systems.values():
            s.weight = p["weight"]
            if (s.lexical.params.k1, s.lexical.params.b) != (p["k1"], p["b"]):
                s.lexical = TurnBM25(p["k1"], p["b"])
                for turn in s.turns:
                    s.lexical.add(turn.render())
        return score(systems, fit_dialogues, fit)["obj"]

    grid = {"weight": FUSE_WEIGHTS, "k1": BM25_K1, "b": BM25_B}
    best, _ = coordinate_search({"weight": 0.5, **bm25}, grid, objective, 2, "hybrid_rag")
    return best


# ---------------------------------------------------------------------------------------------------- the variant
BM25_K1 = (0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0)
BM25_B = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.75, 0.9)
FUSE_WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
SHARES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
PRIORITIES = (
    ("temporal", "version", "sibling", "semantic"),
    ("version", "sibling", "temporal", "semantic"),
    ("version", "sibling", "semantic", "temporal"),
    ("semantic", "temporal", "version", "sibling"),
)
VARIANT_GRID: dict[str, Sequence[Any]] = {
    "fuse_weight": FUSE_WEIGHTS,
    "query_max_df": (None, 0.05, 0.1, 0.2, 0.3),
    "date_weight": (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7),
    "bm25_field": ("descriptor", "both"),
    "bm25_k1": BM25_K1,
    "bm25_b": BM25_B,
    "nb_reply": SHARES,
    "nb_temporal": SHARES,
    "nb_semantic": SHARES,
    "nb_version": SHARES,
    "nb_sibling": SHARES,
    "back_temporal": SHARES,
    "directions": ("out", "both"),
    "priority": PRIORITIES,
    "k": (5, 8, 10, 15, 20),
    "L": (20, 30, 40, 60),
    "H": (1, 2, 3),
    "fuse_depth": (30, 50, 100, 200),
}


def variant_config(base: Any, p: Mapping[str, Any]) -> Any:
    """A RetrievalConfig from the flat search parameters (``nb_<type>``/``back_<type>``: Stage 3 weights)."""
    flat = {k: v for k, v in p.items() if not k.startswith(("nb_", "back_"))}
    fwd = tuple((k[3:], float(v)) for k, v in p.items() if k.startswith("nb_"))
    back = tuple((k[5:], float(v)) for k, v in p.items() if k.startswith("back_"))
    return replace(base, **flat, neighbour=fwd, neighbour_back=back)


def flat_params(cfg: Any) -> dict[str, Any]:
    """The search parameters of a RetrievalConfig (inverse of ``variant_config``)."""
    out = {k: getattr(cfg, k) for k in VARIANT_GRID if not k.startswith(("nb_", "back_"))}
    fwd, back = dict(cfg.neighbour), dict(cfg.neighbour_back)
    out.update({k: fwd.get(k[3:], 0.0) for k in VARIANT_GRID if k.startswith("nb_")})
    out.update({k: back.get(k[5:], 0.0) for k in VARIANT_GRID if k.startswith("back_")})
    return out


def fit_variant(systems: Mapping[str, Any], dialogues: Sequence[Any], fit: Sequence[str], rounds: int) -> Any:
    base = next(iter(systems.values())).retrieval_cfg
    fit_dialogues = [d for d in dialogues if d.id in fit]

    def objective(p: Mapping[str, Any]) -> float:
        set_retrieval(systems, variant_config(base, p))
        return score(systems, fit_dialogues, fit)["obj"]

    best, _ = coordinate_search(flat_params(base), VARIANT_GRID, objective, rounds, "allmem_hybrid")
    return variant_config(base, best)


# ---------------------------------------------------------------------------------------------------- main
def yaml_retrieval(cfg: Any) -> str:
    """The fitted keys as they go under ``method.retrieval`` in configs/method/allmem_hybrid.yaml."""
    p = flat_params(cfg)
    lines = [f"    {k}: {_yaml(v)}" for k, v in p.items() if not k.startswith(("nb_", "back_"))]
    lines.append(f"    neighbour: {{{', '.join(f'{t}: {w}' for t, w in cfg.neighbour)}}}")
    lines.append(f"    neighbour_back: {{{', '.join(f'{t}: {w}' for t, w in cfg.neighbour_back)}}}")
    return "\n".join(lines)


def _yaml(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, tuple):
        return "[" + ", ".join(map(str, v)) + "]"
    return str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="LoCoMo file (default: data/locomo or ../shared/data/locomo)")
    ap.add_argument("--only", nargs="+", default=["bm25", "hybrid_rag", "allmem_hybrid"])
    ap.add_argument("--rounds", type=int, default=3, help="coordinate-ascent rounds for allmem_hybrid")
    ap.add_argument("--no-heldout", action="store_true", help="skip the held-out scores printed at the end")
    args = ap.parse_args(argv)

    import torch

    from allmem.build import build_embedder
    from benchmarks import fit_split

    torch.set_num_threads(1)
    fit = fit_split("locomo")
    dialogues = load_dialogues(args.data)
    held = [d.id for d in dialogues if d.id not in fit]
    embedder = build_embedder(compose("allmem_hybrid"))
    print(f"fit on {', '.join(fit)}; held out (scored for information only): {', '.join(held)}")
    t0 = time.perf_counter()
    chosen: dict[str, Any] = {}
    if "bm25" in args.only or "hybrid_rag" in args.only:
        chosen["bm25"] = fit_bm25(dialogues, fit)
    if "hybrid_rag" in args.only:
        chosen["hybrid_rag"] = fit_hybrid_rag(dialogues, fit, embedder, chosen["bm25"])
    if "allmem_hybrid" in args.only:
        fit_dialogues = [d for d in dialogues if d.id in fit]
        systems = build_systems("allmem_hybrid", fit_dialogues, embedder)
        chosen["allmem_hybrid"] = fit_variant(systems, dialogues, fit, args.rounds)

    print(f"\n# chosen on {', '.join(fit)} in {time.perf_counter() - t0:.0f}s")
    for name in ("bm25", "hybrid_rag"):
        if name in chosen:
            print(f"configs/method/{name}.yaml: " + ", ".join(f"{k}: {v}" for k, v in chosen[name].items()))
    if "allmem_hybrid" in chosen:
        print(
            "configs/method/allmem_hybrid.yaml, method.retrieval:\n" + yaml_retrieval(chosen["allmem_hybrid"])
        )
    if not args.no_heldout and "allmem_hybrid" in chosen:
        held_dialogues = [d for d in dialogues if d.id in held]
        systems = build_systems("allmem_hybrid", held_dialogues, embedder)
        set_retrieval(systems, chosen["allmem_hybrid"])
        res = score(systems, held_dialogues, held)
        print(
            f"held out, for information: allmem_hybrid R@5 {res['R@5']:.2f} N@5 {res['N@5']:.2f} (n={res['n']})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
