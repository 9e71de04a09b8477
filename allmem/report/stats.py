"""Uncertainty for the tables: bootstrap confidence intervals and paired permutation tests over questions.

Why: a difference between two methods on the same questions means something only if it is larger than what
resampling those questions would produce. Table 1 therefore gives, per metric, a 95% percentile bootstrap
interval of the mean (questions resampled with replacement, ``BOOTSTRAP_RESAMPLES`` times, fixed seed), and
between All-Mem and each other method a two-sided paired sign-flip permutation test on the per-question
differences (``PERMUTATION_RESAMPLES`` random sign patterns, fixed seed; exact enumeration when there are at
most that many patterns). p-values are not adjusted for multiple comparisons.

Definitions follow Efron & Tibshirani (1993) for the percentile interval and the paired permutation test as
implemented by ``scipy.stats.permutation_test(permutation_type="samples")`` (randomised p = (hits + 1) /
(resamples + 1), exact p = hits / 2^n); the tests check both against scipy. The resampling is done here with
vectorised numpy (fancy indexing; sign patterns drawn as bytes and summed by table lookup) rather than scipy's
generic machinery, because a table has hundreds of such numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
PERMUTATION_RESAMPLES = 10000
CONFIDENCE = 0.95
SEED = 0
_CHUNK = 2000  # resamples drawn at once (bounds memory to chunk x n)


def describe(reference: str = "All-Mem") -> str:
    """The sentence every table footer carries, so the numbers behind the intervals are never implicit;
    ``reference``: the row the paired tests compare against."""
    return (
        f"{int(CONFIDENCE * 100)}% percentile bootstrap intervals over questions ({BOOTSTRAP_RESAMPLES} "
        f"resamples, seed {SEED}); p: two-sided paired sign-flip permutation test against {reference} on the "
        f"same questions ({PERMUTATION_RESAMPLES} resamples, or exact), not adjusted for multiple comparisons"
    )


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int


def bootstrap_ci(
    values: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE, seed: int = SEED
) -> Interval | None:
    """Percentile interval of the mean of ``values`` (NaN items dropped); None when nothing is left."""
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    n = len(x)
    if n == 0:
        return None
    rng = np.random.default_rng(seed)
    means = np.concatenate(
        [
            x[rng.integers(0, n, size=(min(_CHUNK, resamples - s), n), dtype=np.int32)].mean(axis=1)
            for s in range(0, resamples, _CHUNK)
        ]
    )
    alpha = (1.0 - confidence) / 2
    low, high = np.percentile(means, [100 * alpha, 100 * (1 - alpha)])
    mean = math.fsum(x) / n
    # the interval of a constant sample is the constant itself (floating sums can differ in the last bit)
    if np.all(x == x[0]):
        low = high = mean
    return Interval(mean=mean, low=float(low), high=float(high), n=n)


def paired_permutation_p(
    a: np.ndarray, b: np.ndarray, resamples: int = PERMUTATION_RESAMPLES, seed: int = SEED
) -> float | None:
    """Two-sided p for mean(a - b) = 0, a and b scored on the same items (pairs with a NaN are dropped)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired test needs equal lengths, got {a.shape} and {b.shape}")
    keep = ~(np.isnan(a) | np.isnan(b))
    d = a[keep] - b[keep]
    n = len(d)
    if n == 0:
        return None
    observed = abs(math.fsum(d)) / n
    tol = 1e-9 * max(
        observed, float(np.abs(d).mean()), 1e-12
    )  # float64 sums differ from fsum in the last bits
    if 2**n <= resamples:  # exact: every sign pattern once
        signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
        stats = np.abs(signs @ d / n)
        return float(np.count_nonzero(stats >= observed - tol) / 2**n)
    # Random sign patterns as random bytes, 8 signs each: sum_i s_i d_i = 2 sum_i b_i d_i - sum_i d_i with bits
    # b, and sum_i b_i d_i is a sum of one table lookup per byte (the 256 partial sums of each block of 8 items).
    # A pattern costs n / 8 lookups instead of n multiplications and n random draws.
    blocks = -(-n // 8)
    padded = np.zeros(blocks * 8)
    padded[:n] = d
    bits = (np.arange(256)[:, None] >> np.arange(8)) & 1  # (256, 8): byte value -> its bits
    table = (bits @ padded.reshape(blocks, 8).T).T  # (blocks, 256): partial sum of each block for each byte
    total = padded.sum()
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, resamples, _CHUNK):
        m = min(_CHUNK, resamples - start)
        draws = rng.integers(0, 256, size=(m, blocks), dtype=np.uint8)
        sums = table[np.arange(blocks), draws]  # (m, blocks)
        stats = np.abs(2 * sums.sum(axis=1) - total) / n
        hits += int(np.count_nonzero(stats >= observed - tol))
    return (hits + 1) / (resamples + 1)
