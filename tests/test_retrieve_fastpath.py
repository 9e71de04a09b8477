"""The variant's vectorised retrieval pieces against plain references, exactly (same floats, not approx).

Why exact: these pieces were rewritten for latency (issue 12) on the promise that no ranked id or score moves; a
plain per-item reference makes the promise checkable on banks the hand-made tests do not reach (many link types
both ways, questions, ties, a bank that grows between queries). ``scripts/retrieval_fingerprint.py`` checks the
same promise on real LoCoMo banks.
"""

from __future__ import annotations

import zlib
from datetime import timedelta

import numpy as np
import pytest

from allmem.defaults import paper
from allmem.memory.bank import LINK_TYPES, MemoryBank
from allmem.memory.fusion import top_positions
from allmem.memory.lexical import BM25Params, BM25Scorer
from allmem.memory.retrieve import RetrievalConfig, Retriever
from allmem.memory.signals import REPLY, LinkIndex, neighbour_bonus, neighbour_weights
from allmem.text import asks_question
from tests.fakes import T0

WORDS = "apple pie river stone garden piano trip paint dog cat book camp lake".split()


def _random_bank(rng: np.random.Generator, n: int, dim: int = 8) -> MemoryBank:
    """Random unit vectors and texts (a third of them questions), links of every type, a quarter archived."""
    bank = MemoryBank(dim=dim, d_sigma=4)
    _grow(bank, rng, n)
    return bank


def _grow(bank: MemoryBank, rng: np.random.Generator, n: int) -> None:
    start = len(bank)
    for i in range(start, start + n):
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 6))))
        text = text + ("?" if rng.random() < 0.33 else ".")
        rec = {"speaker": "A" if i % 2 else "B", "text": text, "source_ids": [f"D1:{i}"]}
        vec = rng.standard_normal(bank.dim)
        bank.create_unit([rec], text, [], vec / np.linalg.norm(vec), T0 + timedelta(days=i), order=i)
    ids = bank.full_ids()
    for i in range(max(1, start), len(ids)):
        bank.add_link("temporal", ids[i - 1], ids[i])
        for t in ("semantic", "version", "sibling"):
            j = int(rng.integers(len(ids)))
            if j != i and rng.random() < 0.6:
                bank.add_link(t, ids[i], ids[j], float(rng.random()))
    for uid in rng.choice(ids[start:], size=n // 4, replace=False):
        if bank.is_visible(uid):
            bank.archive(uid)


def _reference_bonus(
    bank: MemoryBank, rows: np.ndarray, scores: np.ndarray, fwd: dict, back: dict
) -> np.ndarray:
    """``neighbour_bonus`` link by link, as its docstring defines it."""
    ids = bank.full_ids_at(rows)
    at = {uid: i for i, uid in enumerate(ids)}
    reply = fwd.get(REPLY, 0.0)
    out = scores.copy()
    for i, c in enumerate(ids):
        best = 0.0
        for lk in bank.in_links(c):  # u -> c: forward weights, reply for a temporal link from a question
            if lk.src in at and lk.src != c:
                w = fwd.get(lk.type, 0.0)
                if reply and lk.type == "temporal" and asks_question(bank.get(lk.src).evidence_text()):
                    w = reply
                best = max(best, w * scores[at[lk.src]])
        for lk in bank.out_links(c):  # c -> u: backward weights
            if lk.dst in at and lk.dst != c:
                best = max(best, back.get(lk.type, 0.0) * scores[at[lk.dst]])
        out[i] = scores[i] + best
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_neighbour_bonus_equals_the_link_by_link_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    bank = _random_bank(rng, 60)
    fwd = {REPLY: 0.8, "temporal": 0.1, "semantic": 0.2, "version": 0.0, "sibling": 0.3}
    back = {"temporal": 0.4, "semantic": 0.05}
    links = LinkIndex(bank)
    for _ in range(20):
        rows = rng.choice(len(bank), size=int(rng.integers(1, 40)), replace=False)
        scores = rng.random(len(rows))
        got = neighbour_bonus(links, rows, scores, *neighbour_weights(fwd, back))
        assert got.tolist() == _reference_bonus(bank, rows, scores, fwd, back).tolist()


def test_link_index_follows_a_bank_that_grows_between_queries() -> None:
    rng = np.random.default_rng(3)
    bank = _random_bank(rng, 30)
    fwd, back = {"temporal": 0.5, REPLY: 0.9}, {"temporal": 0.3, "sibling": 0.2}
    links = LinkIndex(bank)
    rows = np.arange(0, 30, 2)
    neighbour_bonus(links, rows, rng.random(len(rows)), *neighbour_weights(fwd, back))
    _grow(bank, rng, 25)  # new rows past the lookup tables built for 30 units
    rows = np.arange(len(bank))[::-3]
    scores = rng.random(len(rows))
    got = neighbour_bonus(links, rows, scores, *neighbour_weights(fwd, back))
    assert got.tolist() == _reference_bonus(bank, rows, scores, fwd, back).tolist()


def test_bm25_sum_is_bm25s_own_bit_for_bit() -> None:
    import bm25s

    rng = np.random.default_rng(4)
    docs = [list(rng.choice(WORDS, size=int(rng.integers(0, 9)))) for _ in range(50)]
    scorer = BM25Scorer(docs, BM25Params(1.0, 0.3))
    ref = bm25s.BM25(k1=1.0, b=0.3, method="lucene")
    ref.index(docs, show_progress=False)
    for _ in range(30):
        query = list(rng.choice([*WORDS, "unknown"], size=int(rng.integers(1, 7))))  # repeats and misses
        ids = ref.get_tokens_ids(query)
        want = ref.get_scores_from_ids(ids).astype(np.float64) if ids else np.zeros(len(docs))
        assert scorer.scores(query).tolist() == want.tolist()


def test_top_positions_equals_a_full_sort_with_ties() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        s = rng.integers(0, 6, size=int(rng.integers(1, 40))).astype(np.float64)  # many ties
        k = int(rng.integers(1, 45))
        full = np.lexsort((np.arange(len(s)), -s))[:k]
        assert top_positions(s, k).tolist() == full.tolist()
        assert sorted(top_positions(s, k, ordered=False).tolist()) == sorted(full.tolist())


def test_variant_retriever_reused_across_bank_growth_matches_a_fresh_one() -> None:
    """Per-query buffers (fill flags, candidate slots) sized for an older bank must not change any result."""

    class _Embed:
        def encode(self, texts: list[str]) -> np.ndarray:
            out = []
            for t in texts:
                g = np.random.default_rng(zlib.crc32(t.encode())).standard_normal(8)
                out.append(g / np.linalg.norm(g))
            return np.asarray(out, dtype=np.float32)

    rng = np.random.default_rng(6)
    bank = _random_bank(rng, 40)
    cfg = paper(RetrievalConfig,
        k=3, L=12, H=2, K=30, stage1="fused", stage3="neighbour", directions="both", fill=True, fuse_depth=10,
        priority=("temporal", "version", "sibling", "semantic"), date_weight=0.3,
        neighbour=((REPLY, 0.8), ("temporal", 0.1), ("semantic", 0.2), ("sibling", 0.3)),
        neighbour_back=(("temporal", 0.4),),
    )  # fmt: skip
    queries = [" ".join(rng.choice(WORDS, size=3)) for _ in range(8)] + [
        "what about the lake in January 2023?"
    ]
    reused = Retriever(bank, _Embed(), cfg)
    for grow in (0, 30):
        _grow(bank, rng, grow)
        for q in queries:  # a Retriever with a history of queries and bank states, and one without
            a, b = reused.retrieve(q), Retriever(bank, _Embed(), cfg).retrieve(q)
            assert (a.ids, a.scores) == (b.ids, b.scores)
            assert len(a.ids) > a.n_candidates  # the pool fills past the candidates: the fill path ran


def test_link_types_cover_the_side_codes() -> None:
    weights, reply = neighbour_weights({"temporal": 0.5, REPLY: 0.7}, {"sibling": 0.25})
    assert len(weights) == 2 * len(LINK_TYPES) and reply == 0.7
    assert weights[LINK_TYPES.index("temporal")] == 0.5
    assert weights[len(LINK_TYPES) + LINK_TYPES.index("sibling")] == 0.25
