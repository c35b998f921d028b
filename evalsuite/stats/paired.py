"""Paired statistics primitives: Tango and bootstrap CIs of a mean difference, exact McNemar, Wilson, KLD aggregates."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import bdtr, ndtri, stdtrit  # scipy.special only: scipy.stats costs seconds to import

from evalsuite.store.records import KLDResult

#: the most resampled values held in memory at once (n_boot x n is processed in chunks of this size)
_CHUNK = 4_000_000
_FEW = 16  # at most this many distinct differences: resample counts instead of indices


def paired_bootstrap_ci(base: np.ndarray, var: np.ndarray, n_boot: int = 2000, seed: int = 0,
                        alpha: float = 0.05) -> tuple[float, float, float]:
    """Mean of ``var - base`` and its paired bootstrap (1 - alpha) CI, resampling pairs jointly.

    The interval is the expanded percentile interval (Hesterberg 2015): the percentile bounds' distances from
    the estimate are scaled by sqrt(n / (n - 1)) * t(n - 1) / z, which undoes the percentile interval's
    narrowness at small n (about +6% at n = 30, +2% at n = 100, +0.2% at n = 1000); the bounds are clipped
    to [min, max] of the differences, which no mean of a resample can leave.
    Seeded and reproducible. Scores are assumed to lie in [0, 1]: with fewer than two pairs there is no
    variability estimate, so the interval is the whole range of a difference, [-1, 1] (delta 0.0 when n = 0).
    When every difference is equal the interval collapses onto it (a variant identical to the baseline
    gives exactly (0, 0, 0)).
    """
    base = np.asarray(base, dtype=float)
    var = np.asarray(var, dtype=float)
    if base.shape != var.shape or base.ndim != 1:
        raise ValueError(f"paired arrays must be 1-d and equally long, got {base.shape} and {var.shape}")
    diff = var - base
    n = diff.size
    if n == 0:
        return 0.0, -1.0, 1.0
    delta = float(diff.mean())
    if n == 1:
        return delta, -1.0, 1.0
    if np.all(diff == diff[0]):
        return float(diff[0]), float(diff[0]), float(diff[0])
    means = _boot_means(diff, n_boot, np.random.default_rng(seed))
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    widen = math.sqrt(n / (n - 1)) * float(stdtrit(n - 1, 1 - alpha / 2)) / float(ndtri(1 - alpha / 2))
    lo, hi = delta + (lo - delta) * widen, delta + (hi - delta) * widen
    return delta, float(max(lo, diff.min())), float(min(hi, diff.max()))


def tango_z(right_to_wrong: ArrayLike, wrong_to_right: ArrayLike, n: ArrayLike, delta0: float) -> np.ndarray:
    """Tango's (1998) score statistic for H0: delta = delta0, delta = P(wrong->right) - P(right->wrong).

    The variance uses the MLE of P(right->wrong) restricted to delta0 (the root of a quadratic), which keeps
    the statistic informative when no pair is discordant. Decreasing in delta0; elementwise over arrays.
    """
    n12 = np.asarray(wrong_to_right, dtype=float)  # Tango's n12 (variant right only), n21 (baseline right only)
    n21, n = np.asarray(right_to_wrong, dtype=float), np.asarray(n, dtype=float)
    a = 2.0 * n
    b = -n12 - n21 + (2.0 * n - n12 + n21) * delta0
    c = -n21 * delta0 * (1.0 - delta0)
    p21 = (np.sqrt(np.maximum(b * b - 4 * a * c, 0.0)) - b) / np.maximum(2 * a, 1e-300)
    num = n12 - n21 - n * delta0
    var = n * (2 * p21 + delta0 * (1.0 - delta0))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(var > 0, num / np.sqrt(np.maximum(var, 1e-300)), np.sign(num) * np.inf)
    return np.where((var <= 0) & (num == 0), 0.0, z)


@lru_cache(maxsize=8192)
def tango_ci(right_to_wrong: int, wrong_to_right: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Tango's score interval for the difference of paired proportions (variant - baseline).

    Valid at small n and never of zero width: with no discordant pair it is about [-z^2/(n+z^2), z^2/(n+z^2)]
    (Tango 1998, Stat Med 17:891-908; recommended by Fagerland, Lydersen & Laake 2014). (-1, 1) when n = 0.
    A pure function of its counts, so it is cached: a gate's slices and looks repeat counts.
    """
    if n == 0:
        return -1.0, 1.0
    z = float(ndtri(0.5 + confidence / 2))
    est = (wrong_to_right - right_to_wrong) / n
    eps = 1e-12

    def f(d: np.ndarray, target: float) -> np.ndarray:
        return tango_z(right_to_wrong, wrong_to_right, n, d) - target

    lo = -1.0 if f(np.array([-1 + eps]), z)[0] <= 0 else _root(lambda d: f(d, z), -1 + eps, est)
    hi = 1.0 if f(np.array([1 - eps]), -z)[0] >= 0 else _root(lambda d: f(d, -z), est, 1 - eps)
    return float(lo), float(hi)


def _root(f: Callable[[np.ndarray], np.ndarray], a: float, b: float, tol: float = 1e-12, depth: int = 6) -> float:
    """The root of ``f`` between ``a`` and ``b`` (a sign change) by bisection to ``tol``: the midpoint where ``f`` is
    0, else the middle of the last bracket. Each call of ``f`` takes every midpoint the next ``depth`` steps could
    visit (a tree of 2^depth - 1, each computed as that step computes it), so the steps, and the root, are exactly
    those of one-point-at-a-time bisection."""
    fa = float(f(np.array([a]))[0])
    while b - a > tol:
        lo, hi, levels = np.array([a]), np.array([b]), []
        for _ in range(depth):
            mid = (lo + hi) / 2
            levels.append(mid)
            lo, hi = np.stack([lo, mid], 1).ravel(), np.stack([mid, hi], 1).ravel()
        values, node = f(np.concatenate(levels)), 0
        for level in range(depth):
            if not b - a > tol:
                break
            mid, fm = float(levels[level][node]), float(values[(1 << level) - 1 + node])
            if fm == 0:
                return mid
            if (fm > 0) == (fa > 0):
                a, fa, node = mid, fm, 2 * node + 1
            else:
                b, node = mid, 2 * node
    return (a + b) / 2


def _boot_means(diff: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``n_boot`` resamples (with replacement) of the pairs.

    Few distinct differences (binary tasks: -1, 0, 1) are resampled as multinomial counts, which has
    exactly the distribution of resampling indices at a fraction of the cost; otherwise indices, in chunks.
    """
    n = diff.size
    values, counts = np.unique(diff, return_counts=True)
    if values.size <= _FEW:
        return rng.multinomial(n, counts / n, size=n_boot) @ values / n
    per_chunk = max(1, _CHUNK // n)
    means = np.empty(n_boot)
    for start in range(0, n_boot, per_chunk):
        stop = min(n_boot, start + per_chunk)
        means[start:stop] = diff[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    return means


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts b (right->wrong) and c (wrong->right)."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got {b}, {c}")
    if b + c == 0:
        return 1.0
    return float(min(1.0, 2.0 * bdtr(min(b, c), b + c, 0.5)))  # the binomial(b + c, 1/2) is symmetric


def wilson_ci(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n; (0, 1) when n = 0."""
    if n == 0:
        return 0.0, 1.0
    z = float(ndtri(0.5 + confidence / 2))
    center = (k + z * z / 2) / (n + z * z)
    half = z / (n + z * z) * math.sqrt(k * (n - k) / n + z * z / 4)
    return max(0.0, center - half), min(1.0, center + half)


def kld_aggregate(records: Sequence[KLDResult]) -> dict[str, float | None]:
    """Pool the answer tokens of ``records``: token-mean and p99 KLD, max KLD, top-1 agreement.

    Every value is None when the records hold no token.
    """
    tokens = np.fromiter((x for r in records for x in r.token_kld), dtype=float)
    n_tokens = sum(r.n_tokens for r in records)
    if tokens.size == 0 or n_tokens == 0:
        return {"kld_mean": None, "kld_p99": None, "kld_max": None, "top1_agreement": None}
    return {"kld_mean": float(tokens.mean()), "kld_p99": float(np.percentile(tokens, 99)),
            "kld_max": float(tokens.max()),
            "top1_agreement": sum(r.top1_agree for r in records) / n_tokens}
