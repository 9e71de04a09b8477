"""Latency that compares across methods: retrieval without the query embedding, the embedding measured apart.

A method's ``retrieve`` embeds its query through the shared embedder, whose cache makes that free for every
method run after the first on the same questions (the committed Table 2 once showed naive_rag, run first, at
35 ms and All-Mem at 1 ms). So the runner times ``retrieve`` with the embedder watched (``watch``): the time
spent inside the embedder is taken out (``retrieve_search``: retrieval without the query embedding, whatever
the cache holds), and the texts the method asked the embedder for are then encoded again by the model with
the cache bypassed (``query_embed``: the same measurement for every method; absent for a method that embeds
nothing, e.g. BM25). Percentiles (p50 / p95 / p99 / max) of any list of timings: ``percentiles``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

PERCENTILES = (50, 95, 99)


@dataclass
class Watch:
    """What the embedder did during one watched call: milliseconds inside it and the texts it was asked for."""

    ms: float = 0.0
    texts: list[str] = field(default_factory=list)


_local = threading.local()  # a worker thread watches its own retrieve calls only


@contextmanager
def watch(embedder: Any) -> Iterator[Watch]:
    """Watch ``embedder.encode`` (``encode_one`` goes through it) during the block, in this thread."""
    seen = Watch()
    if embedder is None or not callable(getattr(embedder, "encode", None)):
        yield seen
        return
    _install(embedder)
    stack: list[Watch] = getattr(_local, "stack", None) or []
    _local.stack = [*stack, seen]
    try:
        yield seen
    finally:
        _local.stack = stack


def _install(embedder: Any) -> None:
    """Wrap the instance's ``encode`` once: a timed pass-through while a ``watch`` is open in the calling thread."""
    if getattr(embedder, "_allmem_watched", False):
        return
    inner: Callable[[Sequence[str]], Any] = embedder.encode

    def encode(texts: Sequence[str]) -> Any:
        stack = getattr(_local, "stack", None)
        if not stack:
            return inner(texts)
        t0 = time.perf_counter()
        try:
            return inner(texts)
        finally:
            top = stack[-1]
            top.ms += 1000 * (time.perf_counter() - t0)
            top.texts.extend(texts)

    embedder.encode = encode
    embedder._allmem_watched = True


def model_ms(embedder: Any, texts: Sequence[str]) -> float | None:
    """Milliseconds the embedder's model takes for ``texts`` with every cache bypassed (None for no texts)."""
    if not texts:
        return None
    uncached = getattr(embedder, "encode_uncached", None)
    t0 = time.perf_counter()
    if uncached is not None:
        uncached(list(texts))
    else:  # an embedder without a cache (HashEmbedder, test doubles): its encode is the computation
        with _paused():
            embedder.encode(list(texts))
    return 1000 * (time.perf_counter() - t0)


@contextmanager
def _paused() -> Iterator[None]:
    stack = getattr(_local, "stack", None)
    _local.stack = []
    try:
        yield
    finally:
        _local.stack = stack


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """``p50``, ``p95``, ``p99`` (nearest rank: the smallest value with at least p% of the values at or below
    it) and ``max``; None for no values."""
    xs = sorted(float(v) for v in values)
    out: dict[str, float | None] = {}
    for p in PERCENTILES:
        out[f"p{p}"] = xs[max(0, math.ceil(p / 100 * len(xs)) - 1)] if xs else None
    out["max"] = xs[-1] if xs else None
    return out
