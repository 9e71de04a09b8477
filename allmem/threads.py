"""One-thread sections for native thread pools (OpenBLAS, OpenMP) on a shared machine.

Why: the pools default to one thread per core, and their threads spin while waiting for each other. On the
project's 2-core machines, with anything else running, a small parallel kernel then waits milliseconds for the
second thread: OpenBLAS on a query-sized mat-vec (11 ms vs 0.3 ms at N=10^4) and igraph's OpenMP PRPACK on a
1k-node Personalized PageRank (10-300 ms vs 1 ms; one thread is also deterministic, two differ run to run in
the 14th digit). The work in these sections is far too small to gain from a second thread.

Setting a pool's size directly costs about a microsecond, unlike threadpoolctl's context manager (~0.2 ms per
call). The pools are found on first use, never at import; a library loaded after that first use is not seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# A run.workers process (allmem/run/parallel.py) and the forkserver it is forked from hold each native library's
# pool at one thread: these variables are set before the libraries are imported.
ONE_THREAD_ENV = {
    "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
}  # fmt: skip

_POOLS: dict[str, list[Any]] = {}  # user_api ("blas", "openmp") -> threadpoolctl controllers


def _pools(user_api: str) -> list[Any]:
    if user_api not in _POOLS:
        try:
            from threadpoolctl import ThreadpoolController

            _POOLS[user_api] = list(ThreadpoolController().select(user_api=user_api).lib_controllers)
        except ImportError:  # pragma: no cover - threadpoolctl ships with the scientific stack
            _POOLS[user_api] = []
    return _POOLS[user_api]


@contextmanager
def one_thread(user_api: str) -> Iterator[None]:
    """Run the block with every ``user_api`` pool ("blas" or "openmp") at one thread, then restore each."""
    pools = _pools(user_api)
    previous = [lib.get_num_threads() for lib in pools]
    for lib, n in zip(pools, previous, strict=True):
        if n != 1:
            lib.set_num_threads(1)
    try:
        yield
    finally:
        for lib, n in zip(pools, previous, strict=True):
            if n != 1:
                lib.set_num_threads(n)


def single_thread_blas() -> Any:
    """``one_thread("blas")``: for mat-vecs of one query against a bank."""
    return one_thread("blas")


def single_thread_openmp() -> Any:
    """``one_thread("openmp")``: for small OpenMP kernels (igraph's PRPACK)."""
    return one_thread("openmp")
