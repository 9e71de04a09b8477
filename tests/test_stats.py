"""Bootstrap intervals and paired permutation tests: cases worked out by hand, then agreement with scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from allmem.report.stats import (
    BOOTSTRAP_RESAMPLES,
    PERMUTATION_RESAMPLES,
    bootstrap_ci,
    describe,
    paired_permutation_p,
)


def test_all_equal_scores_give_a_zero_width_interval():
    ci = bootstrap_ci(np.full(40, 0.25))
    assert ci is not None
    assert ci.mean == ci.low == ci.high == 0.25
    assert ci.n == 40


def test_two_items_zero_and_one_span_the_whole_range():
    # Resampling two items from {0, 1}: the mean is 0, 0.5 or 1 with probabilities 1/4, 1/2, 1/4. The 2.5th
    # percentile of 2000 such means is 0 and the 97.5th is 1 (each end holds ~500 draws, far above 50).
    ci = bootstrap_ci(np.array([0.0, 1.0]))
    assert ci is not None
    assert (ci.mean, ci.low, ci.high) == (0.5, 0.0, 1.0)


def test_nan_items_are_dropped_and_an_empty_sample_has_no_interval():
    ci = bootstrap_ci(np.array([np.nan, 1.0, 1.0, np.nan]))
    assert ci is not None and ci.n == 2 and ci.low == ci.high == 1.0
    assert bootstrap_ci(np.array([np.nan])) is None
    assert bootstrap_ci(np.array([])) is None


def test_same_seed_same_interval():
    x = np.random.default_rng(3).random(300)
    assert bootstrap_ci(x) == bootstrap_ci(x)


def test_exact_sign_flip_p_by_hand():
    # d = (1, 1, 1): of the 8 sign patterns only +++ and --- reach |mean| = 1, so p = 2/8.
    assert paired_permutation_p(np.ones(3), np.zeros(3)) == 0.25
    # d = (1, 0, 1, 1): the zero's sign is free; |mean| = 3/4 needs the three ones to agree: 2 * 2 / 16.
    assert paired_permutation_p(np.array([1.0, 0, 1, 1]), np.zeros(4)) == 0.25
    # identical scores: every pattern ties the observed 0, p = 1
    same = np.array([0.2, 0.4, 0.9])
    assert paired_permutation_p(same, same) == 1.0


def test_pairs_with_a_missing_score_are_dropped():
    a = np.array([1.0, np.nan, 1.0, 1.0])
    b = np.array([0.0, 0.0, 0.0, np.nan])
    assert paired_permutation_p(a, b) == 0.5  # d = (1, 1): 2 of 4 patterns reach |mean| = 1
    assert paired_permutation_p(np.array([np.nan]), np.array([1.0])) is None
    with pytest.raises(ValueError, match="equal lengths"):
        paired_permutation_p(np.ones(2), np.ones(3))


def test_agrees_with_scipy_on_a_realistic_sample():
    rng = np.random.default_rng(7)
    a = rng.random(400)
    b = np.clip(a + rng.normal(0.03, 0.25, 400), 0, 1)
    ours = paired_permutation_p(a, b)
    theirs = sps.permutation_test(
        (a, b), lambda x, y, axis: np.mean(x - y, axis=axis), permutation_type="samples",
        n_resamples=PERMUTATION_RESAMPLES, random_state=0, vectorized=True,
    ).pvalue  # fmt: skip
    assert ours is not None and abs(ours - theirs) < 0.015  # both are Monte Carlo estimates of the same p
    ci = bootstrap_ci(a)
    ref = sps.bootstrap((a,), np.mean, n_resamples=BOOTSTRAP_RESAMPLES, method="percentile", random_state=0)
    assert ci is not None
    assert abs(ci.low - ref.confidence_interval.low) < 0.006
    assert abs(ci.high - ref.confidence_interval.high) < 0.006


def test_a_clear_difference_is_significant_and_noise_is_not():
    rng = np.random.default_rng(11)
    base = rng.random(500)
    assert paired_permutation_p(base + 0.2, base) < 0.001
    noise = base + rng.normal(0, 0.01, 500) * rng.choice([-1, 1], 500)
    assert paired_permutation_p(noise, base) > 0.05


def test_footer_sentence_states_the_resample_counts():
    text = describe()
    assert str(BOOTSTRAP_RESAMPLES) in text and str(PERMUTATION_RESAMPLES) in text and "seed" in text


def test_table_lookup_sums_equal_the_sign_patterns_they_stand_for():
    """The randomised test draws each pattern as bytes (bit k of byte c is the sign of item 8c + k) and sums by
    table lookup: a plain sign-matrix product over the same bytes must give the same p."""
    from allmem.report.stats import _CHUNK

    rng = np.random.default_rng(5)
    a, b = rng.random(37), rng.random(37)  # 37 items: five bytes, the last one padded
    d = a - b
    n, blocks, resamples = len(d), 5, 3000
    draws = np.random.default_rng(0)
    hits = 0
    for start in range(0, resamples, _CHUNK):
        m = min(_CHUNK, resamples - start)
        bytes_ = draws.integers(0, 256, size=(m, blocks), dtype=np.uint8)
        bits = np.unpackbits(bytes_, axis=1, bitorder="little")[:, :n]
        stats = np.abs((bits * 2.0 - 1) @ d) / n
        hits += int(np.count_nonzero(stats >= abs(d.mean()) - 1e-12))
    assert paired_permutation_p(a, b, resamples=resamples, seed=0) == (hits + 1) / (resamples + 1)
