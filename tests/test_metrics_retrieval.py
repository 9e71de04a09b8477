"""Retrieval metrics and source-id ranking against hand-computed values (docs/PROTOCOL.md; LongMemEval eval_utils)."""

from __future__ import annotations

import math

import pytest

from allmem.metrics import retrieval as rt
from allmem.types import Retrieved

L3 = math.log2(3)  # DCG discount at rank 2 (allmem) / rank 3 (LongMemEval)


def test_recall_and_ndcg_basic() -> None:
    ranked, gold = ["a", "x", "b", "y"], ["a", "b"]
    assert rt.recall_at_k(ranked, gold, 1) == 0.5
    assert rt.recall_at_k(ranked, gold, 3) == 1.0
    # N@1: DCG 1, IDCG over min(2, 1) = 1 hit: 1
    assert rt.ndcg_at_k(ranked, gold, 1) == 1.0
    # N@3: DCG = 1 + 1/log2(4) = 1.5; IDCG = 1 + 1/log2(3)
    assert rt.ndcg_at_k(ranked, gold, 3) == pytest.approx(1.5 / (1 + 1 / L3))


def test_duplicate_ranked_ids_are_deduplicated_first() -> None:
    ranked, gold = ["x", "x", "a", "x", "b"], ["a", "b"]
    # deduplicated: [x, a, b]. Without dedup top-3 = [x, x, a] would give R@3 = 1/2.
    assert rt.recall_at_k(ranked, gold, 2) == 0.5
    assert rt.recall_at_k(ranked, gold, 3) == 1.0
    # N@3: DCG = 1/log2(3) + 1/log2(4); IDCG = 1 + 1/log2(3)
    assert rt.ndcg_at_k(ranked, gold, 3) == pytest.approx((1 / L3 + 0.5) / (1 + 1 / L3))


def test_duplicate_gold_ids_use_set_semantics() -> None:
    # LoCoMo conv-50 lists D4:5 twice: |gold| = 2 distinct ids, so one hit is 1/2 (list semantics: 2/3)
    assert rt.recall_at_k(["D4:5"], ["D4:5", "D4:5", "D5:5"], 1) == 0.5
    # IDCG over min(2, 5) = 2 ranks: DCG 1 / (1 + 1/log2(3))
    assert rt.ndcg_at_k(["D4:5"], ["D4:5", "D4:5", "D5:5"], 5) == pytest.approx(1 / (1 + 1 / L3))


def test_empty_gold_scores_zero() -> None:
    assert rt.recall_at_k(["a", "b"], [], 5) == 0.0
    assert rt.ndcg_at_k(["a", "b"], [], 5) == 0.0
    assert rt.allmem_retrieval(["a"], [], (1,)) == {"R@1": 0.0, "N@1": 0.0}


def test_more_gold_than_k() -> None:
    # gold 3 ids, k = 1: R@1 = 1/3 but N@1 = 1 (IDCG over min(3, 1) = 1 rank)
    assert rt.recall_at_k(["a", "b", "c"], ["a", "b", "c"], 1) == pytest.approx(1 / 3)
    assert rt.ndcg_at_k(["a", "b", "c"], ["a", "b", "c"], 1) == 1.0


def test_allmem_retrieval_keys_in_order() -> None:
    out = rt.allmem_retrieval(["a", "x"], ["a"], (1, 3))
    assert list(out) == ["R@1", "N@1", "R@3", "N@3"]
    assert out == {"R@1": 1.0, "N@1": 1.0, "R@3": 1.0, "N@3": 1.0}


def _unit(uid: str, score: float, *sources: str) -> Retrieved:
    return Retrieved.of_text(uid, uid, sources, score)


def test_rank_source_ids_merged_unit_credits_all_and_best_score_wins() -> None:
    units = [
        _unit("u1", 0.9, "a", "b"),  # a merged unit: both a and b at 0.9
        _unit("u2", 0.7, "c"),
        _unit("u3", 0.8, "b", "d"),  # b already at 0.9 (keeps it); d at 0.8
        _unit("u4", 0.7, "e"),  # ties c at 0.7: c appeared first
        _unit("u5", 0.1, "a"),  # a lower score never lowers a
    ]
    # scores a .9, b .9, d .8, c .7, e .7 -> descending, ties by first appearance
    assert rt.rank_source_ids(units) == ["a", "b", "d", "c", "e"]


def test_rank_source_ids_reorders_by_best_score() -> None:
    # a unit listed later with a higher score lifts its source above earlier ones
    units = [_unit("u1", 0.5, "a"), _unit("u2", 0.4, "b"), _unit("u3", 0.6, "b")]
    assert rt.rank_source_ids(units) == ["b", "a"]
    assert rt.rank_source_ids([]) == []


# ------------------------------------------------------------------ LongMemEval


def test_longmemeval_recall_any_and_all() -> None:
    out = rt.longmemeval_retrieval(["x", "a", "y", "b"], ["a", "b"], (1, 2, 4))
    assert (out["recall_any@1"], out["recall_all@1"]) == (0.0, 0.0)
    assert (out["recall_any@2"], out["recall_all@2"]) == (1.0, 0.0)
    assert (out["recall_any@4"], out["recall_all@4"]) == (1.0, 1.0)


def test_longmemeval_ndcg_ranks_one_and_two_weigh_one() -> None:
    ranked, gold = ["x", "a", "y", "b"], ["a", "b"]
    # @2: DCG = 0*1 + 1*1 = 1; ideal = 1 + 1 = 2 -> 0.5 (allmem N@2 would be (1/log2 3)/(1 + 1/log2 3))
    assert rt.longmemeval_ndcg(ranked, gold, 2) == pytest.approx(0.5)
    assert rt.ndcg_at_k(ranked, gold, 2) == pytest.approx((1 / L3) / (1 + 1 / L3))
    # @4: DCG = 0 + 1 + 0 + 1/log2(4) = 1.5; ideal over min(2, 4) = 2 ranks = 2 -> 0.75
    assert rt.longmemeval_ndcg(ranked, gold, 4) == pytest.approx(0.75)
    # @3 with hits at ranks 1 and 3: DCG = 1 + 1/log2(3); ideal = 2
    assert rt.longmemeval_ndcg(["a", "x", "b"], gold, 3) == pytest.approx((1 + 1 / L3) / 2)


def test_longmemeval_empty_gold_follows_official_code() -> None:
    # any([]) = False, all([]) = True, ideal DCG 0 -> ndcg 0
    out = rt.longmemeval_retrieval(["a"], [], (1,))
    assert out == {"recall_any@1": 0.0, "recall_all@1": 1.0, "ndcg_any@1": 0.0}


def test_is_abstention() -> None:
    assert rt.is_abstention("gpt4_2655b836_abs")
    assert not rt.is_abstention("gpt4_2655b836")
