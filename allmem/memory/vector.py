"""Vector search over a bank surface behind one interface: exact numpy, or faiss (flat, IVF, HNSW).

Why one interface: Stage 1 must be swappable (the latency benchmark compares backends on the same bank) and the
exact backends must agree, which a test checks. Both read the bank's cached, normalised surface matrix, so
inner product is cosine. Results are ordered by (score desc, unit row asc): ties never depend on how a surface
happens to be stored (swap-removal reorders the visible matrix).

The faiss index follows the bank lazily through ``bank.changes_since``: appends are added in place; an archive
or a descriptor change triggers a rebuild on the next ``sync`` (index rebuilding is reported apart from query
latency, as the paper does).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from allmem.memory.bank import MemoryBank

SURFACES = ("visible", "full")
BACKENDS = ("numpy", "faiss")
FAISS_KINDS = ("flat", "ivf", "hnsw", "auto")


class SurfaceIndex:
    """Top-k cosine search over the visible surface (default) or the full bank (ablation)."""

    def __init__(
        self,
        bank: MemoryBank,
        surface: str = "visible",
        backend: str = "numpy",
        faiss_kind: str = "flat",
        approx_from: int = 200_000,
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
        self.bank = bank
        self.surface = surface
        self.backend = backend
        self.faiss_kind = faiss_kind
        self.approx_from = approx_from
        self.ivf_nprobe = ivf_nprobe
        self.hnsw_m = hnsw_m
        self.hnsw_ef_search = hnsw_ef_search
        self.threads = threads
        self._faiss: Any = None
        self._synced = -1  # bank revision the faiss index reflects
        self._n_indexed = 0
        self.rebuilds = 0

    # ------------------------------------------------------------------ surface access
    def _matrix(self) -> np.ndarray:
        return self.bank.visible_matrix_view() if self.surface == "visible" else self.bank.full_matrix_view()

    def _ids_at(self, positions: np.ndarray) -> list[str]:
        if self.surface == "visible":
            return self.bank.visible_ids_at(positions)
        return self.bank.full_ids_at(positions)

    def size(self) -> int:
        return self.bank.n_visible if self.surface == "visible" else len(self.bank)

    # ------------------------------------------------------------------ search
    def search(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The k surface units most similar to ``query`` (a normalised vector), best first."""
        n = self.size()
        if n == 0 or k <= 0:
            return []
        k = min(k, n)
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        if self.backend == "numpy":
            pos, scores = _numpy_topk(self._matrix(), q, k)
        else:
            self.sync()
            scores2, pos2 = self._faiss.search(q.reshape(1, -1), k)
            keep = pos2[0] >= 0
            pos, scores = pos2[0][keep].astype(np.int64), scores2[0][keep]
        ids = self._ids_at(pos)
        rows = self.bank.rows_of(ids)
        order = np.lexsort((rows, -scores))
        return [(ids[i], float(scores[i])) for i in order]

    def score_all(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cosine to every surface unit: (positions, scores); used by hybrid fusion for deep candidate lists."""
        mat = self._matrix()
        with single_thread_blas():
            return np.arange(len(mat)), mat @ np.asarray(query, dtype=np.float32).reshape(-1)

    # ------------------------------------------------------------------ faiss upkeep
    def sync(self) -> None:
        """Bring the faiss index up to date with the bank (no-op for numpy)."""
        if self.backend != "faiss" or self._synced == self.bank.revision:
            return
        changes = self.bank.changes_since(max(self._synced, 0))
        appends_only = self._faiss is not None and all(kind == "add" for kind, _ in changes)
        mat = self._matrix()
        if appends_only and self._kind(len(mat)) == "flat" and len(mat) >= self._n_indexed:
            # visible surface appends at the end, full matrix too: positions stay aligned
            self._faiss.add(np.ascontiguousarray(mat[self._n_indexed :]))
        else:
            self._rebuild(mat)
        self._n_indexed = len(mat)
        self._synced = self.bank.revision

    def _kind(self, n: int) -> str:
        if self.faiss_kind != "auto":
            return self.faiss_kind
        return "flat" if n < self.approx_from else "hnsw"

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
        elif kind == "ivf" and len(data) >= 1000:
            nlist = max(1, int(4 * np.sqrt(len(data))))
            quantizer = faiss.IndexFlatIP(d)
            index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
            sample = (
                data
                if len(data) <= 64 * nlist
                else data[np.random.default_rng(0).choice(len(data), 64 * nlist)]
            )
            index.train(sample)
            index.nprobe = self.ivf_nprobe
        else:  # flat, or IVF on a bank too small to train
            index = faiss.IndexFlatIP(d)
        if len(data):
            index.add(data)
        self._faiss = index
        self.rebuilds += 1


_BLAS: list[Any] | None = None  # BLAS thread-pool controllers, found on first use (never at import)


@contextmanager
def single_thread_blas() -> Iterator[None]:
    """Run a mat-vec on one BLAS thread, then restore the previous setting.

    Why: OpenBLAS splits even a query-sized mat-vec across threads; on a shared 2-core machine waking the
    second thread costs milliseconds (measured: 11 ms vs 0.3 ms at N=10^4). Setting the count directly costs
    about a microsecond, unlike threadpoolctl's context manager (~0.2 ms per call).
    """
    global _BLAS
    if _BLAS is None:
        try:
            from threadpoolctl import ThreadpoolController

            _BLAS = list(ThreadpoolController().select(user_api="blas").lib_controllers)
        except ImportError:  # pragma: no cover - threadpoolctl ships with the scientific stack
            _BLAS = []
    previous = [lib.get_num_threads() for lib in _BLAS]
    for lib, n in zip(_BLAS, previous, strict=True):
        if n != 1:
            lib.set_num_threads(1)
    try:
        yield
    finally:
        for lib, n in zip(_BLAS, previous, strict=True):
            if n != 1:
                lib.set_num_threads(n)


def _numpy_topk(mat: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by a mat-vec and argpartition (no full sort)."""
    with single_thread_blas():
        scores = mat @ q
    if k < len(scores):
        pos = np.argpartition(-scores, k - 1)[:k]
    else:
        pos = np.arange(len(scores))
    return pos.astype(np.int64), scores[pos]


def _import_faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - faiss-cpu is a dependency
        raise ImportError("vector.backend=faiss needs the faiss-cpu package (pip install faiss-cpu)") from exc
    return faiss
