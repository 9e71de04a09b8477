"""Query-time retrieval: Stage 1 anchors, Stage 2 typed-link expansion, Stage 3 re-rank (METHOD.md, paper Sec. 3.4).

Stage 1 scores the searchable surface (visible units; the full bank as an ablation) by dense cosine (the paper),
BM25, or a reciprocal-rank fusion of both. Stage 2 walks typed links breadth-first from the anchors, hop by hop
up to H, adding units until the candidate set holds L (anchors count towards L, as in the authors' code); within
a hop, link types are taken in priority order (version, sibling, semantic, temporal by default), so scarce
budget goes to lineage links first. Archived units may enter here: that is how archived evidence is recovered.
Stage 3 re-ranks the candidates by cosine(query, z) (the paper), by the Stage 1 scorer, or by a cross-encoder,
and keeps K. Each stage is timed separately.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from allmem.memory.bank import LINK_TYPES, MemoryBank
from allmem.memory.lexical import BM25Index
from allmem.memory.vector import SurfaceIndex

STAGE1 = ("dense", "bm25", "hybrid")
STAGE3 = ("cosine", "stage1", "cross_encoder")


@dataclass(frozen=True)
class RetrievalConfig:
    """Retrieval budgets and switches. Defaults are the paper's best sweep point (K=16, k=10, L=40, H=2)."""

    k: int = 10
    L: int = 40
    K: int = 16
    H: int = 2
    stage1: str = "dense"
    stage3: str = "cosine"
    surface: str = "visible"  # "full": the search-the-full-bank ablation
    expand: bool = True  # False: the no-expansion ablation (candidates = anchors)
    type_priority: bool = True  # False: links followed in creation order whatever their type
    priority: tuple[str, ...] = ("version", "sibling", "semantic", "temporal")
    link_types: tuple[str, ...] = LINK_TYPES  # types Stage 2 may follow (ref: sibling and version only)
    directions: str = "out"  # "out": follow links forward (the paper's directed graph); "both": ref
    rrf_k: int = 60
    rrf_depth: int = 50  # per-scorer list depth fused by hybrid Stage 1
    bm25_field: str = "descriptor"
    cross_encoder_path: str | None = None

    def __post_init__(self) -> None:
        where = "method.retrieval"
        if self.stage1 not in STAGE1:
            raise ValueError(f"{where}.stage1 must be one of {STAGE1}, got {self.stage1!r}")
        if self.stage3 not in STAGE3:
            raise ValueError(f"{where}.stage3 must be one of {STAGE3}, got {self.stage3!r}")
        if self.directions not in ("out", "both"):
            raise ValueError(f"{where}.directions must be 'out' or 'both', got {self.directions!r}")
        for name in ("k", "L", "K"):
            if getattr(self, name) < 1:
                raise ValueError(f"{where}.{name} must be >= 1, got {getattr(self, name)}")
        if self.H < 0:
            raise ValueError(f"{where}.H must be >= 0, got {self.H}")
        bad = [t for t in (*self.priority, *self.link_types) if t not in LINK_TYPES]
        if bad:
            raise ValueError(f"{where}.priority/link_types: unknown link types {bad}; known: {LINK_TYPES}")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> RetrievalConfig:
        d = dict(d or {})
        for key in ("priority", "link_types"):
            if key in d and d[key] is not None:
                d[key] = tuple(d[key])
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"method.retrieval: unknown keys {unknown}; known: {sorted(known)}")
        return cls(**d)


@dataclass
class Ranked:
    ids: list[str]
    scores: list[float]
    timings_ms: dict[str, float] = field(default_factory=dict)
    n_anchors: int = 0
    n_candidates: int = 0


def rrf(rankings: Sequence[Sequence[str]], k: int) -> dict[str, float]:
    """Reciprocal rank fusion (Cormack et al., 2009): sum over lists of 1 / (k + rank), rank from 1."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for r, uid in enumerate(ranking, start=1):
            fused[uid] = fused.get(uid, 0.0) + 1.0 / (k + r)
    return fused


def expand(bank: MemoryBank, anchors: Sequence[str], cfg: RetrievalConfig) -> list[str]:
    """Stage 2: breadth-first over typed links, hop by hop up to H, until L candidates (anchors included)."""
    cands = list(dict.fromkeys(anchors))[: cfg.L]
    if not cfg.expand or cfg.H == 0:
        return cands
    seen = set(cands)
    allowed = [t for t in cfg.priority if t in cfg.link_types] if cfg.type_priority else list(cfg.link_types)
    frontier = list(cands)  # a copy: cands grows while this hop is read lazily
    for _ in range(cfg.H):
        if len(cands) >= cfg.L or not frontier:
            break
        nxt: list[str] = []
        for dst in _neighbours(bank, frontier, allowed, cfg):
            if dst not in seen:
                seen.add(dst)
                cands.append(dst)
                nxt.append(dst)
                if len(cands) >= cfg.L:
                    return cands
        frontier = nxt
    return cands


def _neighbours(
    bank: MemoryBank, frontier: Sequence[str], types: Sequence[str], cfg: RetrievalConfig
) -> Iterator[str]:
    """One hop's neighbours in visiting order: by type priority, then frontier rank, then link strength.

    A generator, so expansion stops reading links as soon as the budget L is full.
    """
    both = cfg.directions == "both"
    out_map, in_map = bank.out_map, bank.in_map
    if cfg.type_priority:
        for t in types:
            for uid in frontier:
                links = out_map(uid, t)
                if t == "semantic" and len(links) > 1:
                    yield from sorted(links, key=lambda d: (-links[d].weight, links[d].seq))
                else:
                    yield from links
                if both:
                    yield from in_map(uid, t)
        return
    for uid in frontier:
        pairs = [(lk.seq, dst) for t in types for dst, lk in out_map(uid, t).items()]
        if both:
            pairs += [(lk.seq, src) for t in types for src, lk in in_map(uid, t).items()]
        pairs.sort()
        yield from (dst for _, dst in pairs)


class Retriever:
    """The three-stage pipeline over one bank; indexes follow the bank's change log."""

    def __init__(
        self, bank: MemoryBank, embedder: Any, cfg: RetrievalConfig, vector: dict[str, Any] | None = None
    ) -> None:
        self.bank, self.embedder, self.cfg = bank, embedder, cfg
        self.index = SurfaceIndex(bank, surface=cfg.surface, **(vector or {}))
        needs_bm25 = cfg.stage1 in ("bm25", "hybrid")
        self.bm25 = BM25Index(bank, surface=cfg.surface, field=cfg.bm25_field) if needs_bm25 else None
        self._cross = _load_cross_encoder(cfg.cross_encoder_path) if cfg.stage3 == "cross_encoder" else None

    def sync(self) -> float:
        """Bring the indexes up to date; returns ms spent (index upkeep is not query latency)."""
        t0 = time.perf_counter()
        self.index.sync()
        if self.bm25 is not None:
            self.bm25.sync()
        return 1000 * (time.perf_counter() - t0)

    def embed_query(self, query: str) -> np.ndarray:
        return np.asarray(self.embedder.encode([query]), dtype=np.float32)[0]

    def retrieve(self, query: str, qvec: np.ndarray | None = None) -> Ranked:
        timings = {"index_sync": self.sync()}
        t0 = time.perf_counter()
        if qvec is None:
            qvec = self.embed_query(query)
        t1 = time.perf_counter()
        anchors = self.stage1(query, qvec)
        t2 = time.perf_counter()
        cands = expand(self.bank, anchors, self.cfg)
        t3 = time.perf_counter()
        ids, scores = self.stage3(query, qvec, cands)
        t4 = time.perf_counter()
        timings.update(
            embed=1000 * (t1 - t0), stage1=1000 * (t2 - t1), stage2=1000 * (t3 - t2), stage3=1000 * (t4 - t3)
        )
        timings["mem_lat"] = timings["embed"] + timings["stage1"] + timings["stage2"] + timings["stage3"]
        return Ranked(ids, scores, timings, len(anchors), len(cands))

    def stage1(self, query: str, qvec: np.ndarray) -> list[str]:
        k = self.cfg.k
        if self.cfg.stage1 == "dense":
            return [uid for uid, _ in self.index.search(qvec, k)]
        assert self.bm25 is not None
        if self.cfg.stage1 == "bm25":
            return [uid for uid, _ in self.bm25.search(query, k)]
        depth = max(k, self.cfg.rrf_depth)
        dense = [uid for uid, _ in self.index.search(qvec, depth)]
        lexical = [uid for uid, _ in self.bm25.search(query, depth)]
        return _top(rrf([dense, lexical], self.cfg.rrf_k), self.bank, k)[0]

    def stage3(self, query: str, qvec: np.ndarray, cands: list[str]) -> tuple[list[str], list[float]]:
        if not cands:
            return [], []
        mode = self.cfg.stage3
        if mode == "cross_encoder":
            texts = [self.bank.get(u).descriptor_text() for u in cands]
            raw = self._cross.predict([(query, t) for t in texts], show_progress_bar=False)
            return _top(dict(zip(cands, map(float, raw), strict=True)), self.bank, self.cfg.K)
        rows = self.bank.rows_of(cands)
        dense = self.bank.full_matrix_view()[rows] @ qvec
        if mode == "cosine" or self.cfg.stage1 == "dense":
            return _top(dict(zip(cands, map(float, dense), strict=True)), self.bank, self.cfg.K)
        assert self.bm25 is not None
        lexical = dict(zip(cands, self.bm25.score(query, cands), strict=True))
        if self.cfg.stage1 == "bm25":
            return _top(lexical, self.bank, self.cfg.K)
        by_dense = [cands[i] for i in np.lexsort((rows, -dense))]
        by_lex = sorted(cands, key=lambda u: (-lexical[u], self.bank.get(u).row))
        return _top(rrf([by_dense, by_lex], self.cfg.rrf_k), self.bank, self.cfg.K)


def _top(scores: dict[str, float], bank: MemoryBank, n: int) -> tuple[list[str], list[float]]:
    """Best n by score, ties broken by unit age (older first) so results never depend on dict order."""
    ranked = sorted(scores.items(), key=lambda kv: (-kv[1], bank.get(kv[0]).row))[:n]
    return [u for u, _ in ranked], [s for _, s in ranked]


def _load_cross_encoder(path: str | None) -> Any:
    """A local cross-encoder, or a clear error: the model hub is unreachable here, so no name lookups."""
    hint = (
        "method.retrieval.stage3=cross_encoder needs local weights of cross-encoder/ms-marco-MiniLM-L-6-v2: "
        "download them on a machine with hub access and set method.retrieval.cross_encoder_path to that folder"
    )
    if not path:
        raise FileNotFoundError(f"{hint} (cross_encoder_path is not set)")
    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{hint} ({folder} has no config.json)")
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(folder), device="cpu")
