"""Mem-Lat benchmark: query embedding, Stage 1, 2, 3 and totals on synthetic banks (numpy vs faiss, visible vs full).

Not a timed test: timings depend on the machine. Banks are synthetic but shaped like a consolidated All-Mem bank:
384-d unit vectors drawn around topic centroids, a temporal chain, up to 3 semantic links per insert to earlier
units of the same topic (both ways, under the d_sigma cap), and a consolidated share of units archived, each
with a version or sibling link from a visible unit of its topic. The retrieval budgets are the paper's
(k=10, L=40, K=16, H=2). Medians over the queries; Mem-Lat = Stage 1 + 2 + 3 (+ the query embedding for
"total"), index upkeep excluded as in the paper.

    python scripts/bench_latency.py                       # N = 500, 5k, 10k, 50k, 500k
    python scripts/bench_latency.py --sizes 500 10000 --queries 300 --no-embed
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from allmem.memory.bank import MemoryBank
from allmem.memory.retrieve import RetrievalConfig, Retriever

T0 = datetime(2023, 1, 1)


def build_bank(
    n: int, dim: int = 384, visible_frac: float = 0.6, d_sigma: int = 8, seed: int = 0
) -> MemoryBank:
    rng = np.random.default_rng(seed)
    n_topics = max(1, n // 25)
    centroids = rng.standard_normal((n_topics, dim), dtype=np.float32)
    topic = rng.integers(0, n_topics, n)
    bank = MemoryBank(dim=dim, d_sigma=d_sigma, capacity=n)
    members: dict[int, list[str]] = {}
    chunk = 20_000
    prev = None
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        vecs = centroids[topic[start:stop]] + 0.9 * rng.standard_normal((stop - start, dim), dtype=np.float32)
        for j, vec in enumerate(vecs):
            i = start + j
            rec = {"speaker": "A", "text": f"synthetic turn {i}", "date": "", "source_ids": [f"S{i}"]}
            uid = bank.create_unit([rec], f"summary {i}", ["kw"], vec, T0 + timedelta(seconds=i), order=i)
            if prev is not None:
                bank.add_link("temporal", prev, uid)
            same = members.setdefault(int(topic[i]), [])
            for other in same[-3:]:
                bank.link_semantic(uid, other)
            same.append(uid)
            prev = uid
    n_archive = int(round((1 - visible_frac) * n))
    for row in rng.choice(n, size=n_archive, replace=False):
        bank.archive(f"u{row:06d}")
    for row in range(n):
        uid = f"u{row:06d}"
        if bank.is_visible(uid):
            continue
        visible = [u for u in members[int(topic[row])] if bank.is_visible(u)]
        if visible:
            src = visible[int(rng.integers(len(visible)))]
            bank.add_link("version" if rng.random() < 0.5 else "sibling", src, uid)
    return bank


def query_vectors(bank: MemoryBank, n: int, seed: int = 1) -> np.ndarray:
    """Queries near visible units (a real query lands near what it asks about)."""
    rng = np.random.default_rng(seed)
    ids = bank.visible_ids()
    base = np.stack([bank.embedding(ids[int(i)]) for i in rng.integers(len(ids), size=n)])
    q = base + 0.8 * rng.standard_normal(base.shape, dtype=np.float32) / np.sqrt(bank.dim)
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def embed_latency(n_queries: int) -> float | None:
    """Median ms of one query through the real Embedder (cold cache: model forward + cache write)."""
    try:
        import torch

        from allmem.embed import Embedder
    except ImportError:
        return None
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        emb = Embedder(cache_dir=Path(tmp))
        emb.encode(["warm up the model"])
        times = []
        for i in range(n_queries):
            t0 = time.perf_counter()
            emb.encode([f"What did Caroline say about her plans for trip number {i} next summer?"])
            times.append(1000 * (time.perf_counter() - t0))
    return statistics.median(times)


def time_config(
    bank: MemoryBank, queries: np.ndarray, backend: str, surface: str, warmup: int = 10
) -> dict[str, float]:
    cfg = RetrievalConfig(k=10, L=40, K=16, H=2, surface=surface)
    r = Retriever(bank, embedder=None, cfg=cfg, vector={"backend": backend, "faiss_kind": "flat"})
    r.sync()
    for q in queries[:warmup]:
        r.retrieve("", qvec=q)
    rows: dict[str, list[float]] = {"stage1": [], "stage2": [], "stage3": [], "memlat": []}
    for q in queries:
        t = r.retrieve("", qvec=q).timings_ms
        for key in ("stage1", "stage2", "stage3"):
            rows[key].append(t[key])
        rows["memlat"].append(t["stage1"] + t["stage2"] + t["stage3"])
    return {k: statistics.median(v) for k, v in rows.items()}


def fmt(x: float | None) -> str:
    return "-" if x is None else (f"{x:.3f}" if x < 10 else f"{x:.1f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 5_000, 10_000, 50_000, 500_000])
    ap.add_argument("--queries", type=int, default=200, help="queries per configuration (fewer above 100k)")
    ap.add_argument("--backends", nargs="+", default=["numpy", "faiss"])
    ap.add_argument(
        "--visible-frac", type=float, default=0.6, help="share of units left visible by consolidation"
    )
    ap.add_argument("--no-embed", action="store_true", help="skip the query-embedding measurement")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)

    embed_ms = None if args.no_embed else embed_latency(50)
    results: list[dict[str, Any]] = []
    for n in args.sizes:
        t0 = time.perf_counter()
        bank = build_bank(n, visible_frac=args.visible_frac)
        build_s = time.perf_counter() - t0
        queries = query_vectors(bank, args.queries if n <= 100_000 else max(20, args.queries // 4))
        for backend in args.backends:
            vis = time_config(bank, queries, backend, "visible")
            full = time_config(bank, queries, backend, "full")
            results.append({"n": n, "visible": bank.n_visible, "backend": backend, "build_s": build_s,
                            "embed": embed_ms, "vis": vis, "full": full})  # fmt: skip
            print(f"[bench] N={n} backend={backend} built in {build_s:.1f}s", file=sys.stderr)
        del bank

    base = {(r["n"]): r for r in results if r["backend"] == "numpy"}
    head = ("| N | visible | backend | embed | S1 vis | S1 full | full/vis | S2 | S3 | Mem-Lat vis (no embed) | "
            "Mem-Lat full (no embed) | total vis | S1 vs numpy |")  # fmt: skip
    print(f"\nMedian ms per query; k=10, L=40, K=16, H=2; visible share {args.visible_frac}.\n")
    print(head)
    print("|" + "|".join("---" for _ in range(head.count("|") - 1)) + "|")
    for r in results:
        v, f = r["vis"], r["full"]
        ref = base.get(r["n"])
        vs_numpy = v["stage1"] / ref["vis"]["stage1"] if ref else None
        total = v["memlat"] + r["embed"] if r["embed"] is not None else None
        cells = [f"{r['n']:,}", f"{r['visible']:,}", r["backend"], fmt(r["embed"]), fmt(v["stage1"]), fmt(f["stage1"]),
                 f"{f['stage1'] / v['stage1']:.2f}x", fmt(v["stage2"]), fmt(v["stage3"]), fmt(v["memlat"]),
                 fmt(f["memlat"]), fmt(total), "-" if vs_numpy is None else f"{vs_numpy:.2f}x"]  # fmt: skip
        print("| " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
