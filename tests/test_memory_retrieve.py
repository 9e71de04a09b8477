"""Three-stage retrieval: expansion order under type priority and budgets, scorers, re-ranking, timings."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from allmem.defaults import paper
from allmem.memory.bank import MemoryBank
from allmem.memory.fusion import Fusion, fuse, top_positions
from allmem.memory.lexical import BM25Index
from allmem.memory.retrieve import RetrievalConfig, Retriever, expand, rrf
from allmem.memory.signals import neighbour_scores
from tests.fakes import T0


def _bank_from(
    vectors: Sequence[Sequence[float]], texts: Sequence[str] | None = None, d_sigma: int = 8
) -> tuple[MemoryBank, list[str]]:
    bank = MemoryBank(dim=len(vectors[0]), d_sigma=d_sigma)
    ids = []
    for i, v in enumerate(vectors):
        text = texts[i] if texts else f"unit {i}"
        ids.append(
            bank.create_unit([{"speaker": "A", "text": text, "source_ids": [f"D1:{i}"]}], text, [], v, T0)
        )
    return bank, ids


def _graph() -> tuple[MemoryBank, dict[str, str]]:
    """A -sem(0.5)-> C, A -sem(0.9)-> D, A -temp-> E, A -ver-> F (archived), B -sib-> G, C -ver-> H, F -sib-> I."""
    names = "ABCDEFGHI"
    bank, ids = _bank_from([[1.0, float(i)] for i in range(len(names))])
    n = dict(zip(names, ids, strict=True))
    bank.add_link("semantic", n["A"], n["C"], 0.5)
    bank.add_link("semantic", n["A"], n["D"], 0.9)
    bank.add_link("temporal", n["A"], n["E"])
    bank.add_link("version", n["A"], n["F"])
    bank.add_link("sibling", n["B"], n["G"])
    bank.add_link("version", n["C"], n["H"])
    bank.add_link("sibling", n["F"], n["I"])
    bank.archive(n["F"])
    return bank, n


def _names(n: dict[str, str], ids: list[str]) -> str:
    back = {v: k for k, v in n.items()}
    return "".join(back[i] for i in ids)


def test_expansion_follows_type_priority_hop_by_hop() -> None:
    bank, n = _graph()
    anchors = [n["A"], n["B"]]
    # hop 1: version F, sibling G, semantic D (0.9) before C (0.5), temporal E; hop 2: version H, sibling I
    assert _names(n, expand(bank, anchors, paper(RetrievalConfig, L=40, H=2))) == "ABFGDCEHI"
    assert _names(n, expand(bank, anchors, paper(RetrievalConfig, L=5, H=2))) == "ABFGD"
    assert _names(n, expand(bank, anchors, paper(RetrievalConfig, L=40, H=1))) == "ABFGDCE"
    assert _names(n, expand(bank, anchors, paper(RetrievalConfig, L=40, H=2, expand=False))) == "AB"
    # the archived F enters at Stage 2: archived evidence is recoverable


def test_expansion_without_type_priority_uses_link_creation_order() -> None:
    bank, n = _graph()
    cfg = paper(RetrievalConfig, L=40, H=2, type_priority=False)
    assert _names(n, expand(bank, [n["A"], n["B"]], cfg)) == "ABCDEFGHI"


def test_expansion_restricted_types_and_both_directions() -> None:
    bank, n = _graph()
    ref_like = paper(
        RetrievalConfig, L=50, H=1, link_types=("sibling", "version"), priority=("sibling", "version")
    )
    assert _names(n, expand(bank, [n["A"], n["B"]], ref_like)) == "ABGF"
    both = paper(RetrievalConfig, L=50, H=1, link_types=("sibling", "version"), directions="both")
    assert _names(n, expand(bank, [n["H"]], both)) == "HC"  # C -ver-> H walked backwards
    assert _names(n, expand(bank, [n["H"]], paper(RetrievalConfig, L=50, H=1))) == "H"


class _FixedEmbedder:
    def __init__(self, vec: Sequence[float]) -> None:
        self.vec = np.asarray(vec, dtype=np.float32)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.tile(self.vec, (len(texts), 1))


def _scored_bank() -> tuple[MemoryBank, list[str]]:
    bank, ids = _bank_from([[1, 0, 0], [0.8, 0.6, 0], [0.6, 0.8, 0], [0, 1, 0], [0, 0, 1]])
    bank.archive(ids[1])
    bank.add_link("version", ids[0], ids[1])
    return bank, ids


def test_stage1_visible_vs_full_surface_and_stage3_cosine() -> None:
    bank, ids = _scored_bank()
    emb = _FixedEmbedder([1, 0, 0])
    visible = Retriever(bank, emb, paper(RetrievalConfig, k=2, expand=False))
    assert visible.retrieve("q").ids == [ids[0], ids[2]]
    full = Retriever(bank, emb, paper(RetrievalConfig, k=2, expand=False, surface="full"))
    assert full.retrieve("q").ids == [ids[0], ids[1]]
    # k=1 anchor u0; its version link brings archived u1; Stage 3 keeps K=2 by cosine: 1.0, 0.8
    res = Retriever(bank, emb, paper(RetrievalConfig, k=1, L=3, H=1, K=2)).retrieve("q")
    assert res.ids == [ids[0], ids[1]]
    assert res.scores == pytest.approx([1.0, 0.8])
    assert (res.n_anchors, res.n_candidates) == (1, 2)
    assert {"embed", "stage1", "stage2", "stage3", "mem_lat", "index_sync"} <= set(res.timings_ms)
    assert all(v >= 0 for v in res.timings_ms.values())


def test_bm25_matches_the_lucene_formula_by_hand() -> None:
    bank, ids = _bank_from([[1, 0], [0, 1], [1, 1]], texts=["apple banana", "apples", "cherry"])
    idx = BM25Index(bank)  # Lucene defaults k1 = 1.2, b = 0.75
    # "apples" stems to "appl" like "apple": df = 2 of N = 3 documents, avgdl = 4/3 terms
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    avgdl = 4 / 3
    s0 = idf * 1 / (1 + 1.2 * (0.25 + 0.75 * 2 / avgdl))
    s1 = idf * 1 / (1 + 1.2 * (0.25 + 0.75 * 1 / avgdl))
    hits = idx.search("Apple!", 5)
    assert [u for u, _ in hits] == [ids[1], ids[0]]
    assert [s for _, s in hits] == pytest.approx([s1, s0], rel=1e-6)
    # stop words carry nothing; a repeated query term counts once per occurrence
    assert idx.search("the apple, and an apple?", 5) == idx.search("apple apple", 5)
    assert idx.search("apple apple", 5)[0][1] == pytest.approx(2 * s1, rel=1e-6)
    # archiving changes what Stage 1 may return, not the statistics: an archived unit keeps its score
    bank.archive(ids[1])
    assert idx.search("apple", 5) == [(ids[0], pytest.approx(s0, rel=1e-6))]
    assert idx.score("apple", [ids[1]]) == pytest.approx([s1], rel=1e-6)
    bank.set_descriptor(ids[2], "apple pie", [], [1, 1])
    assert ids[2] in {u for u, _ in idx.search("apple", 5)}
    assert idx.rebuilds == 2  # built once, rebuilt after the descriptor change, not after the archive


def test_common_terms_by_document_share() -> None:
    texts = ["Caroline: pottery class", "Caroline: adoption", "Melanie: camping trip", "Caroline: guitar"]
    bank, _ = _bank_from([[1.0, float(i)] for i in range(4)], texts=texts)
    idx = BM25Index(bank)
    assert idx.common_terms(0.5) == {"carolin"}  # 3 of 4 units
    assert idx.common_terms(0.75) == frozenset()  # "more than": 3 of 4 is not more than 0.75
    assert "melani" in idx.common_terms(0.2)  # 1 of 4 units is more than 0.2
    r = Retriever(bank, _FixedEmbedder([1, 0]), paper(RetrievalConfig, stage1="fused", query_max_df=0.5))
    assert r.dense_query("What did Caroline's mom make?") == "What did 's mom make?"
    assert r.dense_query("Caroline?") == "Caroline?"  # nothing left: the query stays whole


def test_rrf_values_by_hand() -> None:
    fused = rrf([["a", "b"], ["b", "c"]], k=60)
    assert fused == pytest.approx({"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 62})


def test_hybrid_stage1_fuses_dense_and_bm25() -> None:
    texts = ["apple pie recipe", "banana bread", "apple", "cherry"]
    bank, ids = _bank_from([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0], [0, 0, 1]], texts=texts)
    emb = _FixedEmbedder([1, 0, 0])
    cfg = paper(RetrievalConfig, k=2, stage1="hybrid", expand=False, rrf_depth=4)
    r = Retriever(bank, emb, cfg)
    dense = [u for u, _ in r.index.search(emb.vec, 4)]
    lexical = [u for u, _ in r.bm25.search("apple", 4)]
    fused = rrf([dense, lexical], 60)
    expected = sorted(fused, key=lambda u: (-fused[u], bank.get(u).row))[:2]
    assert r.retrieve("apple").ids == expected == [ids[0], ids[2]]
    bm = Retriever(
        bank, emb, paper(RetrievalConfig, k=2, stage1="bm25", stage3="stage1", expand=False)
    ).retrieve("apple")
    assert bm.ids == [ids[2], ids[0]]  # the shorter document wins on BM25


def test_fusion_of_two_score_lists_by_hand() -> None:
    lexical, dense = np.array([2.0, 1.0, 0.0]), np.array([0.5, 0.9, 0.1])
    # min-max: lexical -> [1, 0.5, 0], dense -> [0.5, 1, 0]; 0.25 * lexical + 0.75 * dense
    assert fuse(lexical, dense, 0.25) == pytest.approx([0.625, 0.875, 0.0])
    assert fuse(lexical, dense, 1.0) == pytest.approx([1.0, 0.5, 0.0])
    # a scale fitted on some units applies unchanged to others (Stage 2 units beside the Stage 1 pool)
    f = Fusion.fit(0.5, lexical, dense)
    assert f(np.array([3.0]), np.array([0.1])) == pytest.approx([0.5 * 1.5 + 0.5 * 0.0])
    assert fuse(np.array([1.0, 1.0]), np.array([0.2, 0.4]), 0.5) == pytest.approx(
        [0.0, 0.5]
    )  # flat channel: 0


def _neighbour_bank() -> tuple[MemoryBank, dict[str, str]]:
    """q = e1. Cosines: A 1.0, B 0.6, C 0.5, D 0.0; temporal link A -> C."""
    bank, ids = _bank_from([[1, 0, 0], [0.6, 0.8, 0], [0.5, 0, math.sqrt(0.75)], [0, 1, 0]])
    n = dict(zip("ABCD", ids, strict=True))
    bank.add_link("temporal", n["A"], n["C"])
    return bank, n


def test_neighbour_term_lets_an_expanded_unit_outrank_an_anchor() -> None:
    bank, n = _neighbour_bank()
    emb = _FixedEmbedder([1, 0, 0])
    common = {"k": 2, "L": 10, "H": 1, "K": 3, "directions": "both", "priority": ("temporal",)}
    # paper Stage 3 (cosine): the expanded C (0.5) stays below the anchors A (1.0) and B (0.6)
    cosine = Retriever(bank, emb, paper(RetrievalConfig, **common)).retrieve("q")
    assert _names(n, cosine.ids) == "ABC" and cosine.n_anchors == 2
    # neighbour Stage 3: C = 0.5 + 0.5 * 1.0 (its anchor A) = 1.0; A = 1.0 + 0.5 * 0.5 (C) = 1.25; B = 0.6
    both_ways = {"neighbour": (("temporal", 0.5),), "neighbour_back": (("temporal", 0.5),)}
    cfg = paper(RetrievalConfig, **common, stage3="neighbour", **both_ways)
    res = Retriever(bank, emb, cfg).retrieve("q")
    assert _names(n, res.ids) == "ACB"
    assert res.scores == pytest.approx([1.25, 1.0, 0.6])
    # the same by the function, and only over linked candidates of weighted types
    base = {n["A"]: 1.0, n["B"]: 0.6, n["C"]: 0.5}
    assert neighbour_scores(bank, base, {"temporal": 0.5}) == pytest.approx(
        {n["A"]: 1.0, n["B"]: 0.6, n["C"]: 1.0}
    )
    assert neighbour_scores(bank, base, {}, {"temporal": 0.2}) == pytest.approx(
        {n["A"]: 1.1, n["B"]: 0.6, n["C"]: 0.5}
    )
    assert neighbour_scores(bank, base, {"semantic": 0.5}) == pytest.approx(base)


def test_reply_weight_applies_to_the_turn_after_a_question() -> None:
    texts = ["What inspired you?", "A visit to the LGBTQ center.", "I painted a sunrise.", "It took a week."]
    bank, ids = _bank_from([[1.0, float(i)] for i in range(4)], texts=texts)
    q, a, st, t = ids
    bank.add_link("temporal", q, a)
    bank.add_link("temporal", st, t)
    base = {q: 1.0, a: 0.2, st: 0.9, t: 0.2}
    # the reply to the question gains 0.8 * 1.0; the turn after a statement only 0.1 * 0.9
    out = neighbour_scores(bank, base, {"reply": 0.8, "temporal": 0.1})
    assert out == pytest.approx({q: 1.0, a: 1.0, st: 0.9, t: 0.29})
    # without a temporal weight the reply weight still applies; backward weights look at the next turn
    assert neighbour_scores(bank, base, {"reply": 0.8})[t] == pytest.approx(0.2)
    assert neighbour_scores(bank, base, {}, {"temporal": 0.5})[st] == pytest.approx(0.9 + 0.1)


def test_fill_appends_the_stage1_pool_after_the_candidates() -> None:
    bank, n = _neighbour_bank()
    emb = _FixedEmbedder([1, 0, 0])
    cfg = paper(
        RetrievalConfig, k=1, L=10, H=1, K=10, stage3="neighbour", neighbour=(("temporal", 0.5),), fill=True
    )
    res = Retriever(bank, emb, cfg).retrieve("q")
    # candidates A (1.0) and C (0.5 + 0.5 * 1.0), tied: the older first; then the rest of the pool by cosine
    assert _names(n, res.ids) == "ACBD"
    assert res.scores == pytest.approx([1.0, 1.0, 0.6, 0.0])
    with pytest.raises(ValueError, match="fill"):
        paper(RetrievalConfig, stage1="fused", stage3="cosine", fill=True)


def test_cross_encoder_without_weights_fails_clearly(tmp_path) -> None:
    bank, _ = _scored_bank()
    with pytest.raises(FileNotFoundError, match="cross_encoder_path"):
        Retriever(bank, _FixedEmbedder([1, 0, 0]), paper(RetrievalConfig, stage3="cross_encoder"))
    with pytest.raises(FileNotFoundError, match="config.json"):
        Retriever(
            bank,
            _FixedEmbedder([1, 0, 0]),
            paper(RetrievalConfig, stage3="cross_encoder", cross_encoder_path=str(tmp_path)),
        )


def test_bad_config_is_named() -> None:
    with pytest.raises(ValueError, match="method.retrieval.stage1"):
        paper(RetrievalConfig, stage1="sparse")
    with pytest.raises(ValueError, match=r"unknown key\(s\) method\.retrieval\.topk"):
        paper(RetrievalConfig, **{"topk": 3})
    with pytest.raises(ValueError, match="unknown link types"):
        paper(RetrievalConfig, priority=("causal",))


def test_top_positions_breaks_ties_by_position() -> None:
    s = np.array([3.0, 1.0, 3.0, 2.0, 3.0])
    assert top_positions(s, 2).tolist() == [0, 2]  # three tied at 3.0: the first two positions
    assert top_positions(s, 4).tolist() == [0, 2, 4, 3]
    assert sorted(top_positions(s, 2, ordered=False).tolist()) == [0, 2]
    assert top_positions(s, 9).tolist() == [0, 2, 4, 3, 1]
    assert top_positions(s, 0).tolist() == [] and top_positions(np.zeros(0), 3).tolist() == []


def test_fused_stage3_scores_an_archived_unit_on_the_pool_scale() -> None:
    texts = ["apple pie recipe", "banana bread", "apple", "cherry jam"]
    bank, ids = _bank_from([[1, 0, 0], [0.6, 0.8, 0], [0, 1, 0], [0, 0, 1]], texts=texts)
    bank.add_link("version", ids[2], ids[0])
    bank.archive(ids[0])  # off the surface: reached only through its version link
    cfg = paper(RetrievalConfig, k=1, L=5, H=1, K=4, stage1="fused", stage3="stage1", fuse_weight=0.6)
    r = Retriever(bank, _FixedEmbedder([1, 0, 0]), cfg)
    res = r.retrieve("apple")
    visible = [ids[1], ids[2], ids[3]]
    lex = dict(zip(ids, BM25Index(bank).score("apple", ids), strict=True))
    dense = {u: float(bank.embedding(u) @ np.array([1, 0, 0], dtype=np.float32)) for u in ids}
    scale = Fusion.fit(0.6, np.array([lex[u] for u in visible]), np.array([dense[u] for u in visible]))
    expected = float(scale(np.array([lex[ids[0]]]), np.array([dense[ids[0]]]))[0])
    # the anchor "apple" (0.6 * 1 + 0.4 * 0) brings the archived "apple pie", whose cosine 1 lies above the pool
    assert res.ids[:2] == [ids[0], ids[2]] and res.n_candidates == 2
    assert res.scores[0] == pytest.approx(expected) and expected > 0.6
