"""Vector search over a bank surface behind one interface: exact numpy, or faiss (flat, PQ, IVF, HNSW), or ``auto``.

Why one interface: Stage 1 must be swappable (the latency benchmark compares backends on the same bank) and the
exact backends must agree, which a test checks. Both read the bank's cached, normalised surface matrix, so
inner product is cosine. Results are ordered by (score desc, unit row asc): ties never depend on how a surface
happens to be stored (swap-removal reorders the visible matrix).

``backend="auto"`` (the default of the All-Mem configs) searches exactly with numpy while the surface holds
fewer than ``approx_from`` units and with an approximate faiss index (``approx_kind``) from there on: an exact
mat-vec costs about 3 ms per 100k units on one core, so the 10 ms Mem-Lat of a million-unit bank needs an
approximate index.

``pq`` is the default approximate kind: product quantisation with 4-bit codes scanned by faiss's SIMD "fast
scan" kernels (``IndexPQFastScan``; Andre et al., "Accelerated nearest neighbor search with quick ADC", 2017),
``pq_m`` sub-quantisers (dimension / 8 unless set), then the best ``refine * k`` codes re-scored exactly against the surface matrix (faiss
calls this a refine step; the index keeps no second copy of the vectors). The codes take ``pq_m / 2`` bytes
per unit, so a scan of every code is some twenty times cheaper than the exact mat-vec, trains in seconds and
does not depend on how the bank clusters; it stays linear in N. ``ivf`` (inverted lists, ``ivf_nprobe``
probed) and ``hnsw`` (a graph) are sub-linear but lose recall where neighbours do not share coarse clusters:
on the benchmark's million-unit bank IVF needs a third of its lists for a recall@10 of 0.95 (``make bench``
prints the trade-off of every kind side by side).

The faiss index follows the bank lazily through ``bank.changes_since``: appends are added in place (PQ and IVF
keep what they were trained on); an archive or a descriptor change triggers a rebuild on the next ``sync``
(index rebuilding is reported apart from query latency, as the paper does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from allmem.memory.bank import MemoryBank
from allmem.memory.fusion import top_positions
from allmem.threads import single_thread_blas

SURFACES = ("visible", "full")
BACKENDS = ("numpy", "faiss", "auto")
FAISS_KINDS = ("flat", "pq", "ivf", "hnsw", "auto")
APPROX_KINDS = ("pq", "ivf", "hnsw")
MIN_TRAIN = 1000  # a surface smaller than this is searched flat by the trained kinds (PQ, IVF)
PQ_TRAIN = 65_536  # units sampled to train the PQ codebooks (16 centroids per sub-quantiser need far fewer)


class SurfaceIndex:
    """Top-k cosine search over the visible surface (default) or the full bank (ablation)."""

    def __init__(
        self,
        bank: MemoryBank,
        surface: str = "visible",
        backend: str = "auto",
        faiss_kind: str = "flat",
        approx_from: int = 100_000,
        approx_kind: str = "pq",
        pq_m: int | None = None,
        refine: int = 10,
        ivf_nprobe: int = 16,
        hnsw_m: int = 32,
        hnsw_ef_search: int = 128,
        threads: int = 1,
    ) -> None:
        if surface not in SURFACES:
            raise ValueError(f"vector.surface must be one of {SURFACES}, got {surface!r}")
        if backend not in BACKENDS:
            raise ValueError(f"vector.backend must be one of {BACKENDS}, got {backend!r}")
        if faiss_kind not in FAISS_KINDS:
            raise ValueError(f"vector.faiss_kind must be one of {FAISS_KINDS}, got {faiss_kind!r}")
        if approx_kind not in APPROX_KINDS:
            raise ValueError(f"vector.approx_kind must be one of {APPROX_KINDS}, got {approx_kind!r}")
        if pq_m is not None and (pq_m <= 0 or bank.dim % pq_m):
            raise ValueError(f"vector.pq_m must divide the embedding dimension {bank.dim}, got {pq_m}")
        if refine < 1:
            raise ValueError(f"vector.refine must be a positive integer, got {refine}")
        self.bank = bank
        self.surface = surface
        self.backend = backend
        self.faiss_kind = faiss_kind
        self.approx_from = approx_from
        self.approx_kind = approx_kind
        # dimension / 8 by default (48 for MiniLM's 384): 8 dimensions per 4-bit sub-quantiser
        self.pq_m = pq_m or max(m for m in range(1, max(1, bank.dim // 8) + 1) if bank.dim % m == 0)
        self.refine = refine
        self.ivf_nprobe = ivf_nprobe
        self.hnsw_m = hnsw_m
        self.hnsw_ef_search = hnsw_ef_search
        self.threads = threads
        self._faiss: Any = None
        self._built_kind = ""
        self._rows = np.zeros(
            0, dtype=np.int64
        )  # visible position -> bank row, as of bank revision _rows_rev
        self._rows_rev = -1
        self._synced = -1  # bank revision the faiss index reflects
        self._n_indexed = 0
        self.rebuilds = 0

    # ------------------------------------------------------------------ surface access
    def _matrix(self) -> np.ndarray:
        return self.bank.visible_matrix_view() if self.surface == "visible" else self.bank.full_matrix_view()

    def size(self) -> int:
        return self.bank.n_visible if self.surface == "visible" else len(self.bank)

    # ------------------------------------------------------------------ search
    def search(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The k surface units most similar to ``query`` (a normalised vector), best first."""
        rows, scores = self.search_rows(query, k)
        return list(zip(self.bank.full_ids_at(rows), map(float, scores), strict=True))

    def search_rows(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``search`` as bank rows and scores (arrays), best first, ties by row: no unit ids on the hot path."""
        n = self.size()
        if n == 0 or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        k = min(k, n)
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        if not self.uses_faiss(n):
            pos, scores = _numpy_topk(self._matrix(), q, k)
        else:
            self.sync()
            depth = min(n, k * self.refine) if self._built_kind == "pq" else k
            scores2, pos2 = self._faiss.search(q.reshape(1, -1), depth)
            keep = pos2[0] >= 0
            pos, scores = pos2[0][keep].astype(np.int64), scores2[0][keep]
            if self._built_kind == "pq":  # refine: exact cosines of the candidates, the best k kept
                scores = self._matrix()[pos] @ q
                best = top_positions(scores, k, ordered=False)  # ties at the cut: the first position
                pos, scores = pos[best], scores[best]
        rows = self.rows_at(pos)
        order = np.lexsort((rows, -scores))
        return rows[order], scores[order]

    def rows_at(self, positions: np.ndarray) -> np.ndarray:
        """Bank rows of surface positions (the visible matrix is stored in its own order)."""
        if self.surface == "full":
            return np.asarray(positions, dtype=np.int64)
        return self.surface_rows()[positions]

    def surface_rows(self) -> np.ndarray:
        """Bank row of every surface position, in surface order (cached until the bank changes; do not mutate)."""
        if self.surface == "full":
            if len(self._rows) != len(self.bank):
                self._rows = np.arange(len(self.bank), dtype=np.int64)
            return self._rows
        if self._rows_rev != self.bank.revision:
            self._rows = self.bank.rows_of(self.bank.visible_ids())
            self._rows_rev = self.bank.revision
        return self._rows

    def uses_faiss(self, n: int | None = None) -> bool:
        """Whether a search of the surface (``n`` units) goes to faiss: always, never, or from ``approx_from``."""
        if self.backend == "auto":
            return (self.size() if n is None else n) >= self.approx_from
        return self.backend == "faiss"

    def score_all(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cosine to every surface unit: (bank rows in surface order, scores as float64); the exact path of fused
        Stage 1. The rows array is the index's cached one: read it, do not mutate it."""
        mat = self._matrix()
        with single_thread_blas():
            scores = mat @ np.asarray(query, dtype=np.float32).reshape(-1)
        return self.surface_rows(), scores.astype(np.float64)

    # ------------------------------------------------------------------ faiss upkeep
    def sync(self) -> None:
        """Bring the faiss index up to date with the bank (no-op for numpy)."""
        if not self.uses_faiss() or self._synced == self.bank.revision:
            return
        changes = self.bank.changes_since(max(self._synced, 0))
        appends_only = self._faiss is not None and all(kind == "add" for kind, _ in changes)
        mat = self._matrix()
        same_kind = self._faiss is not None and self._kind(len(mat)) == self._built_kind
        if appends_only and same_kind and len(mat) >= self._n_indexed:
            # visible surface appends at the end, full matrix too: positions stay aligned
            self._faiss.add(np.ascontiguousarray(mat[self._n_indexed :]))
        else:
            self._rebuild(mat)
        self._n_indexed = len(mat)
        self._synced = self.bank.revision

    def _kind(self, n: int) -> str:
        if self.backend == "auto":
            return self.approx_kind
        if self.faiss_kind != "auto":
            return self.faiss_kind
        return "flat" if n < self.approx_from else self.approx_kind

    def _rebuild(self, mat: np.ndarray) -> None:
        faiss = _import_faiss()
        if self.threads:
            faiss.omp_set_num_threads(int(self.threads))
        d = self.bank.dim
        kind = self._kind(len(mat))
        data = np.ascontiguousarray(mat, dtype=np.float32)
        if kind == "hnsw":
            index = faiss.IndexHNSWFlat(d, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efSearch = self.hnsw_ef_search
        elif kind == "pq" and len(data) >= MIN_TRAIN:
            index = faiss.IndexPQFastScan(d, self.pq_m, 4, faiss.METRIC_INNER_PRODUCT)
            index.train(_sample(data, PQ_TRAIN))
        elif kind == "ivf" and len(data) >= MIN_TRAIN:
            # faiss's rule of thumb, 4 sqrt(N) lists, each trained on 40 points (faiss warns below 39) in 10
            # k-means rounds: a 600k-unit surface trains in minutes on 2 cores (sqrt(N) lists train faster but
            # reach a recall@10 of only about 0.7 at nprobe 16 on the benchmark's banks)
            nlist = max(1, min(int(4 * np.sqrt(len(data))), len(data) // 39))
            quantizer = faiss.IndexFlatIP(d)
            index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
            index.cp.niter = 10
            index.train(_sample(data, 40 * nlist))
            index.nprobe = self.ivf_nprobe
        else:  # flat, or PQ / IVF on a bank too small to train (rebuilt as such once it is large enough)
            index = faiss.IndexFlatIP(d)
            kind = "flat"
        if len(data):
            index.add(data)
        self._faiss = index
        self._built_kind = kind
        self.rebuilds += 1


def _numpy_topk(mat: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by a mat-vec and a partial sort; a tie at the cut keeps the first surface position (a bare
    argpartition keeps an arbitrary one of the tied)."""
    with single_thread_blas():
        scores = mat @ q
    pos = top_positions(scores, k, ordered=False)
    return pos.astype(np.int64), scores[pos]


def _sample(data: np.ndarray, n: int) -> np.ndarray:
    """At most ``n`` rows of ``data`` in their order, drawn with a fixed seed (training is deterministic)."""
    if n >= len(data):
        return data
    return data[np.sort(np.random.default_rng(0).choice(len(data), n, replace=False))]


def _import_faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - faiss-cpu is a dependency
        raise ImportError("vector.backend=faiss needs the faiss-cpu package (pip install faiss-cpu)") from exc
    return faiss
