"""Query-time retrieval: Stage 1 anchors, Stage 2 typed-link expansion, Stage 3 re-rank (METHOD.md, paper Sec. 3.4).

Stage 1 scores the searchable surface (visible units; the full bank as an ablation) by dense cosine (the paper),
BM25, a reciprocal-rank fusion of both (``hybrid``), or a min-max normalised convex fusion of both (``fused``,
``allmem.memory.fusion``). Stage 2 walks typed links breadth-first from the anchors, hop by hop up to H, adding
units until the candidate set holds L (anchors count towards L, as in the authors' code); within a hop, link
types are taken in priority order (version, sibling, semantic, temporal by default), so scarce budget goes to
lineage links first. Archived units may enter here: that is how archived evidence is recovered. Stage 3
re-ranks the candidates by cosine(query, z) (the paper), by the Stage 1 scorer, by a cross-encoder, or
(``neighbour``) by the Stage 1 score plus a share of the best linked candidate's score, and keeps K
(``fill``: the rest of the Stage 1 pool follows, so the harness's budget, not K, decides how much is used).
Each stage is timed separately.

Why the ``neighbour`` Stage 3: re-ranking by the very score Stage 1 used means an expanded unit can never
outrank the anchors that brought it in, so expansion cannot change the top K. Adding ``weight[type] * score``
of the best linked candidate lets a turn next to a strong hit (the reply to a question, the next line of a
story) rise above a weak anchor: the topology then changes the ranking, which is what it is for.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from allmem.memory.bank import LINK_TYPES, MemoryBank
from allmem.memory.fusion import Fusion, top_positions
from allmem.memory.lexical import BM25Index, BM25Params
from allmem.memory.signals import (
    REPLY,
    LinkIndex,
    Period,
    PeriodIndex,
    common_word_filter,
    neighbour_bonus,
    neighbour_weights,
    query_periods,
)
from allmem.memory.vector import SurfaceIndex
from allmem.threads import single_thread_blas

STAGE1 = ("dense", "bm25", "hybrid", "fused")
STAGE3 = ("cosine", "stage1", "cross_encoder", "neighbour")


@dataclass(frozen=True)
class RetrievalConfig:
    """Retrieval budgets and switches. Defaults are the paper's best sweep point (K=16, k=10, L=40, H=2)."""

    WHERE: ClassVar[str] = "method.retrieval"  # its node in the config; values: configs/method/allmem.yaml

    k: int
    L: int
    K: int
    H: int
    stage1: str
    stage3: str
    surface: str  # "full": the search-the-full-bank ablation
    expand: bool  # False: the no-expansion ablation (candidates = anchors)
    type_priority: bool  # False: links followed in creation order whatever their type
    priority: tuple[str, ...]
    link_types: tuple[str, ...]  # types Stage 2 may follow (ref: sibling and version only)
    directions: str  # "out": follow links forward (the paper's directed graph); "both": ref
    rrf_k: int
    rrf_depth: int  # per-scorer list depth fused by hybrid Stage 1
    bm25_field: str
    bm25_k1: float
    bm25_b: float
    fuse_weight: float  # fused: share of the lexical channel (1 - weight: dense)
    fuse_depth: int  # fused: each channel's top list; their union is the pool normalised and ranked
    query_max_df: float | None  # words in more than this share of units are not embedded (see dense_query)
    neighbour: tuple[tuple[str, float], ...]  # Stage 3 neighbour: weight per link type, link u -> c
    neighbour_back: tuple[tuple[str, float], ...]  # ... and for a link c -> u (walked backwards)
    date_weight: float  # fused: added to the score of units dated in a month / year the query names
    fill: bool  # after Stage 3, the rest of the Stage 1 pool by its score, up to K units in all
    cross_encoder_path: str | None

    def __post_init__(self) -> None:
        where = "method.retrieval"
        for name in ("neighbour", "neighbour_back"):  # null clears a weight map an included file set
            object.__setattr__(self, name, getattr(self, name) or ())
        if self.stage1 not in STAGE1:
            raise ValueError(f"{where}.stage1 must be one of {STAGE1}, got {self.stage1!r}")
        if self.stage3 not in STAGE3:
            raise ValueError(f"{where}.stage3 must be one of {STAGE3}, got {self.stage3!r}")
        if self.directions not in ("out", "both"):
            raise ValueError(f"{where}.directions must be 'out' or 'both', got {self.directions!r}")
        for name in ("k", "L", "K", "fuse_depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"{where}.{name} must be >= 1, got {getattr(self, name)}")
        if self.H < 0:
            raise ValueError(f"{where}.H must be >= 0, got {self.H}")
        if not 0.0 <= self.fuse_weight <= 1.0:
            raise ValueError(f"{where}.fuse_weight must lie in [0, 1], got {self.fuse_weight}")
        if self.query_max_df is not None and not 0.0 < self.query_max_df <= 1.0:
            raise ValueError(f"{where}.query_max_df must be null or in (0, 1], got {self.query_max_df}")
        bad = [t for t in (*self.priority, *self.link_types) if t not in LINK_TYPES]
        bad += [t for t, _ in self.neighbour if t not in (*LINK_TYPES, REPLY)]
        bad += [t for t, _ in self.neighbour_back if t not in LINK_TYPES]
        if bad:
            raise ValueError(
                f"{where}.priority/link_types/neighbour/neighbour_back: unknown link types {bad}; known: "
                f"{LINK_TYPES} (and {REPLY!r} in neighbour)"
            )
        if self.date_weight and self.stage1 != "fused":
            raise ValueError(f"{where}.date_weight applies to stage1=fused only")
        if self.stage3 == "neighbour" and self.stage1 == "hybrid":
            raise ValueError(
                f"{where}.stage3=neighbour needs a Stage 1 score for every unit: not hybrid (RRF)"
            )
        same_scale = self.stage3 in ("stage1", "neighbour") or (self.stage1, self.stage3) == (
            "dense",
            "cosine",
        )
        if self.fill and (self.stage1 == "hybrid" or not same_scale):
            raise ValueError(
                f"{where}.fill ranks the rest of the Stage 1 pool by its Stage 1 score, so Stage 3 must score on "
                "that scale: stage3 stage1 or neighbour (or dense + cosine), and stage1 not hybrid (RRF)"
            )
        BM25Params(self.bm25_k1, self.bm25_b)  # validates

    @property
    def uses_bm25(self) -> bool:
        return self.stage1 in ("bm25", "hybrid", "fused")


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
        self.bm25 = (
            BM25Index(
                bank, surface=cfg.surface, field=cfg.bm25_field, params=BM25Params(cfg.bm25_k1, cfg.bm25_b)
            )
            if cfg.uses_bm25 or cfg.query_max_df is not None
            else None
        )
        self._cross = _load_cross_encoder(cfg.cross_encoder_path) if cfg.stage3 == "cross_encoder" else None
        self._fusion: Fusion | None = None  # the current query's Stage 1 scale, reused by Stage 3
        self._lex_all: np.ndarray | None = None  # the current query's BM25 of every unit, by row
        self._pool_rows = np.zeros(0, dtype=np.int64)  # this query's Stage 1 pool (bank rows) ...
        self._pool_scores = np.zeros(0, dtype=np.float64)  # ... and their Stage 1 scores
        self._taken = np.zeros(0, dtype=bool)  # fill: the candidates' rows, flagged while _finish runs
        self.links = LinkIndex(bank) if cfg.stage3 == "neighbour" else None
        self._weights = neighbour_weights(dict(cfg.neighbour), dict(cfg.neighbour_back))
        self._dense_all: np.ndarray | None = None  # this query's cosine to every unit, when computed exactly
        self._row_ids: list[str] = []  # unit id by bank row
        self._fused_all: np.ndarray | None = None  # ... and its fused score, likewise
        self._when = PeriodIndex(bank)
        self._periods: list[Period] = []  # the current query's named months / years

    def sync(self) -> float:
        """Bring the indexes up to date; returns ms spent (index upkeep is not query latency)."""
        t0 = time.perf_counter()
        self.index.sync()
        if self.bm25 is not None:
            self.bm25.sync()
        if self.links is not None:
            self.links.sync()
        return 1000 * (time.perf_counter() - t0)

    def dense_query(self, query: str) -> str:
        """The text the dense channel embeds: the query minus words found in more than ``query_max_df`` of units.

        Why: a sentence embedding of a short question is dominated by a name that occurs in every unit of one
        speaker (every conversational unit carries its speaker), so dense search returns that speaker's turns
        rather than the topic asked about, and fails outright when a question names the wrong person. A word
        that common tells units apart no better than a stop word, so it is dropped, as a vocabulary's max_df
        drops it in lexical retrieval; the lexical channel keeps it, weighted by its (low) idf.
        """
        if self.cfg.query_max_df is None or self.bm25 is None:
            return query
        return common_word_filter(query, self.bm25.common_terms(self.cfg.query_max_df))

    def embed_query(self, query: str) -> np.ndarray:
        return np.asarray(self.embedder.encode([self.dense_query(query)]), dtype=np.float32)[0]

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

    # ------------------------------------------------------------------ Stage 1
    def stage1(self, query: str, qvec: np.ndarray) -> list[str]:
        """The k anchors; keeps this query's Stage 1 pool (rows and scores) for Stage 3 and ``fill``."""
        cfg, k = self.cfg, self.cfg.k
        self._dense_all = self._fused_all = None
        depth = max(k, cfg.fuse_depth) if cfg.fill else k
        if cfg.stage1 == "dense":
            rows, scores = self.index.search_rows(qvec, depth)
        elif cfg.stage1 == "fused":
            rows, scores = self._fused_pool(query, qvec)
        else:
            assert self.bm25 is not None
            if cfg.stage1 == "bm25":
                rows, scores = self.bm25.top_rows(self.bm25.scores_all(query), depth)
            else:
                d = max(k, cfg.rrf_depth)
                dense = [uid for uid, _ in self.index.search(qvec, d)]
                lexical = [uid for uid, _ in self.bm25.search(query, d)]
                return _top(rrf([dense, lexical], cfg.rrf_k), self.bank, k)[0]
        self._pool_rows, self._pool_scores = rows, np.asarray(scores, dtype=np.float64)
        if cfg.stage1 == "fused":  # the pool's rows ascend, so ties by position are ties by row, as in _best
            return self._ids_of(rows[top_positions(self._pool_scores, k)])
        return self._ids_of(rows[_best(rows, self._pool_scores, k)])

    def _fused_pool(self, query: str, qvec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Union of each channel's top ``fuse_depth`` surface units (rows), scored by the fusion fitted on it."""
        assert self.bm25 is not None
        depth = max(self.cfg.k, self.cfg.fuse_depth)
        self._lex_all = self.bm25.scores_all(query)
        self._periods = query_periods(query) if self.cfg.date_weight else []
        if self.index.uses_faiss():  # a large bank: the approximate top list, cosines gathered row by row
            lex_rows, _ = self.bm25.top_rows(self._lex_all, depth)
            dense_rows, _ = self.index.search_rows(qvec, depth)
            rows = np.union1d(dense_rows, lex_rows)  # ascending
            lex, dense = self._lex_all[rows], self._gather(rows, qvec)
            self._fusion = Fusion.fit(self.cfg.fuse_weight, lex, dense)
            return rows, self._fused(rows, lex, dense)
        # exact: one mat-vec over the surface serves Stage 1 and most of Stage 3
        surface, dense_s = self.index.score_all(qvec)
        n = len(self.bank)
        self._dense_all = np.full(n, np.nan)  # by row; NaN off the surface (gathered if asked)
        self._dense_all[surface] = dense_s
        lex_rows, _ = self.bm25.top_rows(self._lex_all, depth, ordered=False)
        mark = np.zeros(n, dtype=bool)
        mark[surface[top_positions(dense_s, depth, ordered=False)]] = True
        mark[lex_rows] = True
        rows = mark.nonzero()[0]  # ascending, all on the surface: no cosine to gather
        self._fusion = Fusion.fit(self.cfg.fuse_weight, self._lex_all[rows], self._dense_all[rows])
        self._fused_all = self._fused(None, self._lex_all, self._dense_all)  # Stage 3 only reads it
        return rows, self._fused_all[rows]

    def _fused(self, rows: np.ndarray | None, lex: np.ndarray, dense: np.ndarray) -> np.ndarray:
        """The fused Stage 1 score, plus ``date_weight`` for units in a period the query names (rows None: all)."""
        assert self._fusion is not None
        fused = self._fusion(lex, dense)
        if self._periods:
            fused = fused + self.cfg.date_weight * self._when.mask(self._periods, rows)
        return fused

    def _dense(self, rows: np.ndarray, qvec: np.ndarray) -> np.ndarray:
        """Cosines of any units: read from this query's surface mat-vec where it has them, else gathered."""
        if self._dense_all is not None:
            dense = self._dense_all[rows]
            miss = np.isnan(dense)
            if miss.any():
                dense[miss] = self._gather(rows[miss], qvec)
            return dense
        return self._gather(rows, qvec)

    def _gather(self, rows: np.ndarray, qvec: np.ndarray) -> np.ndarray:
        with single_thread_blas():
            return (self.bank.full_matrix_view()[rows] @ qvec).astype(np.float64)

    def _stage1_rows(self, query: str, qvec: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The Stage 1 scorer's score of any units (archived ones included), by bank row."""
        if self.cfg.stage1 == "dense":
            return self._dense(rows, qvec)
        assert self.bm25 is not None
        if self.cfg.stage1 == "bm25":
            return self.bm25.scores_all(query)[rows]
        assert self._lex_all is not None  # set by this query's Stage 1
        if self._fused_all is None:
            return self._fused(rows, self._lex_all[rows], self._dense(rows, qvec))
        fused = self._fused_all[rows]
        miss = np.isnan(fused)  # units off the surface (archived ones reached at Stage 2)
        if miss.any():
            off = rows[miss]
            fused[miss] = self._fused(off, self._lex_all[off], self._gather(off, qvec))
        return fused

    # ------------------------------------------------------------------ Stage 3
    def stage3(self, query: str, qvec: np.ndarray, cands: list[str]) -> tuple[list[str], list[float]]:
        if not cands:
            return [], []
        mode, cfg = self.cfg.stage3, self.cfg
        if mode == "cross_encoder":
            texts = [self.bank.get(u).descriptor_text() for u in cands]
            raw = self._cross.predict([(query, t) for t in texts], show_progress_bar=False)
            return _top(dict(zip(cands, map(float, raw), strict=True)), self.bank, cfg.K)
        rows = self.bank.rows_of(cands)
        if mode == "neighbour":
            assert self.links is not None
            base = self._stage1_rows(query, qvec, rows)
            return self._finish(rows, neighbour_bonus(self.links, rows, base, *self._weights))
        if mode == "cosine" or cfg.stage1 == "dense":
            return self._finish(rows, self._dense(rows, qvec))
        if cfg.stage1 in ("bm25", "fused"):
            return self._finish(rows, self._stage1_rows(query, qvec, rows))
        assert self.bm25 is not None
        dense = self._dense(rows, qvec)
        lexical = dict(zip(cands, self.bm25.score(query, cands), strict=True))
        by_dense = [cands[i] for i in np.lexsort((rows, -dense))]
        by_lex = sorted(cands, key=lambda u: (-lexical[u], self.bank.get(u).row))
        return _top(rrf([by_dense, by_lex], cfg.rrf_k), self.bank, cfg.K)

    def _ids_of(self, rows: np.ndarray) -> list[str]:
        """Unit ids of bank rows (a row's id never changes, so the list only grows)."""
        if len(self._row_ids) < len(self.bank):
            self._row_ids.extend(self.bank.full_ids_at(range(len(self._row_ids), len(self.bank))))
        ids = self._row_ids
        return [ids[r] for r in rows.tolist()]

    def _finish(self, rows: np.ndarray, scores: np.ndarray) -> tuple[list[str], list[float]]:
        """Best K candidates; with ``fill``, the Stage 1 pool's other units compete on their Stage 1 score."""
        if self.cfg.fill:
            if len(self._taken) < len(self.bank):  # a flag by bank row, False between queries
                self._taken = np.zeros(len(self.bank), dtype=bool)
            self._taken[rows] = True
            rest = ~self._taken[self._pool_rows]
            self._taken[rows] = False
            rows = np.concatenate([rows, self._pool_rows[rest]])
            scores = np.concatenate([scores, self._pool_scores[rest]])
        order = _best(rows, scores, self.cfg.K)
        return self._ids_of(rows[order]), scores[order].tolist()


def _best(rows: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
    """Positions of the best n by score, ties broken by unit age (older first)."""
    return np.lexsort((rows, -scores))[:n]


def _top(scores: dict[str, float], bank: MemoryBank, n: int) -> tuple[list[str], list[float]]:
    """Best n by score, ties broken by unit age (older first) so results never depend on dict order."""
    if not scores:
        return [], []
    ids = list(scores)
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(ids))
    order = np.lexsort((bank.rows_of(ids), -values))[:n]
    return [ids[i] for i in order], [float(values[i]) for i in order]


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
