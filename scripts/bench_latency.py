"""Mem-Lat benchmark: retrieval latency per query without the query embedding, side by side in one run.

Not a timed test: timings depend on the machine, so every table prints ratios next to the milliseconds.

1. LoCoMo size: paper-faithful ``allmem`` and the ``allmem_hybrid`` variant on the real LoCoMo banks of the
   first ``--locomo`` conversations (consolidation off: it changes a few units, not the latency), every question
   of those conversations; Stage 1 + 2 + 3 (Mem-Lat without the query embedding), the embedding apart.
2. Synthetic banks of N units (default 10^4, 10^5, 10^6), shaped like a consolidated All-Mem bank: 384-d unit
   vectors around topic centroids, a temporal chain, up to 3 semantic links per insert to earlier units of the
   same topic (under the d_sigma cap), 40% archived with a version or sibling link from a visible unit of their
   topic, and short texts of Zipf-distributed words for the lexical channel. Per N: exact (numpy) and
   approximate (faiss, ``approx_kind`` as the config's ``backend: auto`` chooses it) Stage 1 latency, recall@10
   of the approximate top 10 against the exact one, Mem-Lat of the paper pipeline on each, the BM25 channel
   (top 100 of the surface) at the same N, and the variant's whole Mem-Lat (fused Stage 1, neighbour Stage 3)
   up to ``--variant-max``. Index building is reported apart, as the paper does. The 10^6 bank needs about
   9 GB of memory and several minutes to build.
3. Approximate kinds side by side: recall@10 and Stage 1 latency of the config's kind (PQ fast scan) at several
   re-scoring depths (``--refines``, candidates = refine x 10), and of an IVF index on the same bank at several
   probe counts (``--nprobes``; empty to skip its build). Why it is printed: the generator draws N/25 topics, so
   clusters grow linearly with N while IVF's lists grow as 4 sqrt(N); at 10^6 one list holds about a dozen
   topics whose members are noisy, and IVF needs a third of its lists for a recall@10 of 0.95, while a scan of
   every 4-bit code followed by exact re-scoring does not depend on how the bank clusters. The table lets a
   user with a large bank choose ``method.vector`` settings from measured numbers.

    python scripts/bench_latency.py                          # both parts (make bench)
    python scripts/bench_latency.py --sizes 10000 100000 --locomo 1 --queries 100
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from allmem.defaults import from_node
from allmem.memory.bank import MemoryBank
from allmem.memory.lexical import BM25Index, BM25Params
from allmem.memory.retrieve import RetrievalConfig, Retriever
from allmem.memory.vector import SurfaceIndex

T0 = datetime(2023, 1, 1)
ROOT = Path(__file__).resolve().parents[1]
METHODS = ("allmem", "allmem_hybrid")


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------- configs
def method_config(method: str, overrides: Sequence[str] = ()) -> Any:
    """The composed run configuration of ``allmem run dataset=locomo method=<method>``."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return compose("config", overrides=["dataset=locomo", f"method={method}", *overrides])


def retrieval_and_vector(method: str) -> tuple[RetrievalConfig, dict[str, Any]]:
    from omegaconf import OmegaConf

    node = method_config(method).method
    vector = OmegaConf.to_container(node.vector, resolve=True)
    return from_node(RetrievalConfig, node.retrieval, RetrievalConfig.WHERE), dict(vector)


# ---------------------------------------------------------------------------------------------------- LoCoMo size
def locomo_side_by_side(n_dialogues: int) -> list[dict[str, Any]]:
    """Per method: median / mean Mem-Lat without embedding and the median embedding, over real questions."""
    import tempfile

    import torch

    from allmem.build import build, build_embedder, build_run_llm
    from allmem.paths import resolve_data_path
    from allmem.run.pipeline import ingest
    from allmem.systems import Resources
    from benchmarks.locomo import load_locomo

    torch.set_num_threads(1)
    cfg = method_config("allmem", ["atc.enabled=false"])
    embedder = build_embedder(cfg)
    tmp = Path(tempfile.mkdtemp(prefix="bench_"))
    llm = build_run_llm(cfg, tmp)
    dialogues = load_locomo(resolve_data_path("locomo", None))[:n_dialogues]
    configs = {m: retrieval_and_vector(m) for m in METHODS}
    samples: dict[str, dict[str, list[float]]] = {m: {"memlat": [], "embed": []} for m in METHODS}
    for d in dialogues:
        t0 = time.perf_counter()
        system = build(cfg.method, resources=Resources(embedder=embedder, llm=llm, run_dir=tmp))
        ingest(system, d, progress=False)
        log(f"LoCoMo {d.id}: bank of {len(system.bank)} units in {time.perf_counter() - t0:.0f}s")
        retrievers = {
            m: Retriever(system.bank, embedder, rcfg, vector) for m, (rcfg, vector) in configs.items()
        }
        for r in retrievers.values():  # warm-up: query embeddings into the cache, indexes built
            for q in d.questions:
                r.retrieve(q.text)
        # interleaved, order alternating per question: both methods see the same machine load
        for i, q in enumerate(d.questions):
            for method in METHODS if i % 2 == 0 else METHODS[::-1]:
                t = retrievers[method].retrieve(q.text).timings_ms
                samples[method]["memlat"].append(t["stage1"] + t["stage2"] + t["stage3"])
                samples[method]["embed"].append(t["embed"])
    return [
        {
            "method": m,
            "n_queries": len(s["memlat"]),
            "median": statistics.median(s["memlat"]),
            "mean": statistics.fmean(s["memlat"]),
            "p95": float(np.percentile(s["memlat"], 95)),
            "embed": statistics.median(s["embed"]),
        }
        for m, s in samples.items()
    ]


# ---------------------------------------------------------------------------------------------------- synthetic
def build_bank(
    n: int, dim: int = 384, visible_frac: float = 0.6, d_sigma: int = 8, seed: int = 0, vocab: int = 30_000
) -> MemoryBank:
    """A synthetic consolidated bank of ``n`` units (see the module docstring); vectors come in chunks."""
    rng = np.random.default_rng(seed)
    n_topics = max(1, n // 25)
    centroids = rng.standard_normal((n_topics, dim), dtype=np.float32)
    topic = rng.integers(0, n_topics, n)
    words = np.minimum(rng.zipf(1.3, size=(n, 12)), vocab) - 1  # word ids, Zipf-distributed
    bank = MemoryBank(dim=dim, d_sigma=d_sigma, capacity=n)
    members: dict[int, list[str]] = {}
    chunk = 20_000
    prev = None
    t0 = time.perf_counter()
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        vecs = centroids[topic[start:stop]] + 0.9 * rng.standard_normal((stop - start, dim), dtype=np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        for j, vec in enumerate(vecs):
            i = start + j
            text = " ".join(f"w{w}" for w in words[i])
            rec = {"speaker": "A", "text": text, "date": "", "source_ids": [f"S{i}"]}
            uid = bank.create_unit([rec], text, (), vec, T0 + timedelta(seconds=i), order=i)
            if prev is not None:
                bank.add_link("temporal", prev, uid)
            same = members.setdefault(int(topic[i]), [])
            for other in same[-3:]:
                w = float(vec @ bank.embedding(other))
                bank.add_link("semantic", uid, other, w)
                bank.add_link("semantic", other, uid, w)
            same.append(uid)
            prev = uid
        if n >= 200_000 and stop % 200_000 == 0:
            log(f"synthetic N={n:,}: {stop:,} units written ({time.perf_counter() - t0:.0f}s)")
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


def query_texts(n: int, seed: int = 2, vocab: int = 30_000) -> list[str]:
    """Four words each, drawn from the bank's Zipf vocabulary past its 50 most frequent words."""
    rng = np.random.default_rng(seed)
    ids = np.minimum(rng.zipf(1.3, size=(n, 4)) + 50, vocab) - 1
    return [" ".join(f"w{w}" for w in row) for row in ids]


class _NoEmbedder:
    """Queries arrive as vectors: nothing to embed."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:  # pragma: no cover - never called
        raise RuntimeError("the benchmark passes query vectors")


def _median_memlat(r: Retriever, queries: np.ndarray, texts: list[str], warmup: int = 5) -> float:
    for q, t in zip(queries[:warmup], texts[:warmup], strict=True):
        r.retrieve(t, qvec=q)
    out = []
    for q, t in zip(queries, texts, strict=True):
        timings = r.retrieve(t, qvec=q).timings_ms
        out.append(timings["stage1"] + timings["stage2"] + timings["stage3"])
    return statistics.median(out)


def _recall_and_ms(index: SurfaceIndex, queries: np.ndarray, truth: list[set[str]]) -> tuple[float, float]:
    hits, ms = 0, []
    for q, gold in zip(queries, truth, strict=True):
        t0 = time.perf_counter()
        found = index.search(q, 10)
        ms.append(1000 * (time.perf_counter() - t0))
        hits += len(gold & {u for u, _ in found})
    return hits / (10 * len(queries)), statistics.median(ms)


def tradeoff(
    approx: SurfaceIndex,
    exact: SurfaceIndex,
    queries: np.ndarray,
    truth: list[set[str]],
    refines: Sequence[int],
    nprobes: Sequence[int],
    vector: dict[str, Any],
) -> list[dict[str, Any]]:
    """Rows (kind, setting, recall@10, median Stage 1 ms, build s): the built PQ index at each re-scoring depth
    (its configured one restored afterwards), then an IVF index built on the same surface at each probe count;
    ``truth``: the exact top 10 of each query."""
    out: list[dict[str, Any]] = []
    if approx._built_kind == "pq":
        keep = approx.refine
        for refine in sorted(set(refines)):
            approx.refine = refine
            rec, ms = _recall_and_ms(approx, queries, truth)
            out.append(
                {"kind": f"pq (M={approx.pq_m})", "setting": f"refine {refine}", "recall": rec, "ms": ms}
            )
        approx.refine = keep
    if nprobes:
        ivf = SurfaceIndex(exact.bank, **{**vector, "backend": "faiss", "faiss_kind": "ivf"})
        t0 = time.perf_counter()
        ivf.sync()
        build = time.perf_counter() - t0
        index = ivf._faiss
        for nprobe in sorted({min(int(p), index.nlist) for p in nprobes}):
            index.nprobe = nprobe
            rec, ms = _recall_and_ms(ivf, queries, truth)
            out.append({"kind": f"ivf ({index.nlist:,} lists)", "setting": f"nprobe {nprobe} "
                        f"({nprobe / index.nlist:.1%})", "recall": rec, "ms": ms, "build_s": build})  # fmt: skip
    return out


def synthetic_row(
    n: int, n_queries: int, with_variant: bool, refines: Sequence[int] = (), nprobes: Sequence[int] = ()
) -> dict[str, Any]:
    t0 = time.perf_counter()
    bank = build_bank(n)
    row: dict[str, Any] = {"n": n, "visible": bank.n_visible, "build_s": time.perf_counter() - t0}
    queries = query_vectors(bank, n_queries)
    texts = query_texts(n_queries)
    paper, vector = retrieval_and_vector("allmem")
    variant, _ = retrieval_and_vector("allmem_hybrid")
    approx = {**vector, "backend": "faiss", "faiss_kind": vector.get("approx_kind", "pq")}
    exact_index = SurfaceIndex(bank, backend="numpy")
    approx_index = SurfaceIndex(bank, **approx)
    t0 = time.perf_counter()
    approx_index.sync()
    row["approx_build_s"] = time.perf_counter() - t0
    row["approx_kind"] = approx["faiss_kind"]
    truth, s1_exact = [], []
    for q in queries:
        t0 = time.perf_counter()
        truth.append({u for u, _ in exact_index.search(q, 10)})
        s1_exact.append(1000 * (time.perf_counter() - t0))
    row["recall@10"], row["s1_approx"] = _recall_and_ms(approx_index, queries, truth)
    row["s1_exact"] = statistics.median(s1_exact)
    row["tradeoff"] = tradeoff(approx_index, exact_index, queries, truth, refines, nprobes, vector)
    no_embed = _NoEmbedder()
    exact_vec = {**vector, "backend": "numpy"}
    row["memlat_exact"] = _median_memlat(Retriever(bank, no_embed, paper, exact_vec), queries, texts)
    r_approx = Retriever(bank, no_embed, paper, approx)
    r_approx.index = approx_index  # the index built above: its build time is not query latency
    row["memlat_approx"] = _median_memlat(r_approx, queries, texts)
    # the lexical channel at the same N: BM25 (the variant's field and parameters) over the units' texts
    bm25 = BM25Index(bank, field=variant.bm25_field, params=BM25Params(variant.bm25_k1, variant.bm25_b))
    t0 = time.perf_counter()
    bm25.sync()
    row["bm25_build_s"] = time.perf_counter() - t0
    bm25_ms = []
    for t in texts:
        t0 = time.perf_counter()
        bm25.search(t, 100)
        bm25_ms.append(1000 * (time.perf_counter() - t0))
    row["bm25"] = statistics.median(bm25_ms)
    row["memlat_variant"], row["variant_backend"] = None, "-"
    if with_variant:  # the whole variant: fused Stage 1 (vector search as the config says), neighbour Stage 3
        variant = replace(
            variant, query_max_df=None
        )  # synthetic queries arrive as vectors: nothing to filter
        r_var = Retriever(bank, no_embed, variant, vector)
        r_var.bm25 = bm25
        if r_var.index.uses_faiss():
            r_var.index = approx_index
        r_var.sync()
        row["memlat_variant"] = _median_memlat(r_var, queries, texts)
        row["variant_backend"] = "faiss" if r_var.index.uses_faiss() else "numpy"
    return row


# ---------------------------------------------------------------------------------------------------- output
def fmt(x: float | None) -> str:
    return "-" if x is None else (f"{x:.3f}" if x < 10 else f"{x:.1f}")


def print_locomo(rows: list[dict[str, Any]], n_dialogues: int) -> None:
    base = next(r for r in rows if r["method"] == "allmem")
    print(
        f"\n## LoCoMo size: first {n_dialogues} conversation(s), {base['n_queries']} questions, ms per query\n"
    )
    print(
        "| method | Mem-Lat median (no embed) | mean | p95 | vs allmem (median) | query embedding (median) |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        ratio = r["median"] / base["median"]
        cells = [
            r["method"],
            fmt(r["median"]),
            fmt(r["mean"]),
            fmt(r["p95"]),
            f"{ratio:.2f}x",
            fmt(r["embed"]),
        ]
        print("| " + " | ".join(cells) + " |", flush=True)


def print_synthetic_head() -> None:
    print("\n## Synthetic banks: median ms per query (no query embedding); index builds apart\n")
    head = (
        "| N | visible | S1 exact | S1 approx | approx kind | recall@10 | Mem-Lat exact | Mem-Lat approx | "
        "BM25 top-100 | variant Mem-Lat | bank build s | approx build s | BM25 build s |"
    )
    print(head)
    print("|" + "|".join("---" for _ in range(head.count("|") - 1)) + "|", flush=True)


def print_synthetic_row(r: dict[str, Any]) -> None:
    variant = f"{fmt(r['memlat_variant'])} ({r['variant_backend']})" if r["memlat_variant"] else "-"
    cells = [f"{r['n']:,}", f"{r['visible']:,}", fmt(r["s1_exact"]), fmt(r["s1_approx"]), r["approx_kind"],
             f"{r['recall@10']:.3f}", fmt(r["memlat_exact"]), fmt(r["memlat_approx"]), fmt(r["bm25"]), variant,
             f"{r['build_s']:.0f}", f"{r['approx_build_s']:.0f}", f"{r['bm25_build_s']:.0f}"]  # fmt: skip
    print("| " + " | ".join(cells) + " |", flush=True)


def print_tradeoff(rows: list[dict[str, Any]]) -> None:
    rows = [r for r in rows if r.get("tradeoff")]
    if not rows:
        return
    print("\n## Approximate search: recall@10 against exact search and median Stage 1 ms, by setting\n")
    print("| N | kind | setting | recall@10 | S1 approx ms | vs exact S1 | build s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        for t in r["tradeoff"]:
            build = t.get("build_s", r["approx_build_s"])
            cells = [f"{r['n']:,}", t["kind"], t["setting"], f"{t['recall']:.3f}", fmt(t["ms"]),
                     f"{t['ms'] / r['s1_exact']:.3f}x", f"{build:.0f}"]  # fmt: skip
            print("| " + " | ".join(cells) + " |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--locomo", type=int, default=2, help="LoCoMo conversations for part 1 (0: skip)")
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=200, help="synthetic queries per size")
    ap.add_argument(
        "--variant-max", type=int, default=100_000,
        help="largest N at which the whole variant is timed (its link index adds memory at 10^6)",
    )  # fmt: skip
    ap.add_argument(
        "--refines", type=int, nargs="*", default=[1, 2, 5, 10, 20],
        help="PQ re-scoring depths (x 10 candidates) for the trade-off table (the config's refine is the main row)",
    )  # fmt: skip
    ap.add_argument(
        "--nprobes", type=int, nargs="*", default=[16, 64, 256, 1024],
        help="IVF lists probed in the trade-off table (an IVF index is built for it; none given: no IVF rows)",
    )  # fmt: skip
    args = ap.parse_args(argv)

    if args.locomo:  # each table is printed as soon as it is measured: a long run shows its results early
        print_locomo(locomo_side_by_side(args.locomo), args.locomo)
    if args.sizes:
        print_synthetic_head()
        rows = []
        for n in args.sizes:
            rows.append(synthetic_row(n, args.queries, n <= args.variant_max, args.refines, args.nprobes))
            print_synthetic_row(rows[-1])
            log(f"synthetic N={n:,} done")
        print_tradeoff(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
