"""Anytime-valid confidence sequences for a bounded mean, by betting (pure numpy/scipy).

Observations y_i in [0, 1] with mean mu. Against a candidate mean m, a gambler who bets a fixed fraction
c in (0, 1] of her capital on "mu > m" at every sample holds

    K_n(m, c) = prod_i (1 - c + c * y_i / m)          (= prod_i (1 + lambda (y_i - m)), lambda = c / m)

Each factor is >= 0 and has expectation <= 1 whenever mu <= m, so K_n(m, c) is a nonnegative
supermartingale under every such distribution, and so is the average over a grid of c ("diversified Kelly",
Waudby-Smith & Ramdas 2023, JRSS-B 86(1):1-27). Ville's inequality gives P(sup_n K_n(m) >= 1/alpha) <= alpha:
the set {m : K_n(m) < 1/alpha} is a lower confidence *sequence*, valid simultaneously at every n, so the
data may be looked at after every round and sampling stopped whenever a decision is reached
(Howard, Ramdas, McAuliffe & Sekhon 2021, Ann. Statist. 49(2):1055-1080). The upper side bets on
1 - y against 1 - m. Because every bet is constant, K_n depends on the *multiset* of observations, not on
their order: re-gating a stored run at its final n reproduces the verdict without knowing when it was looked at.

Everything is expressed as distinct ``values`` in [0, 1] with ``weights`` (their counts; weights may carry
leading batch dimensions for simulation). Paired differences d in [-1, 1] enter as y = (1 + d) / 2.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

ALPHA = 0.05  #: error rate of each one-sided bound (a lower and an upper bound: a 90% two-sided sequence)
GRID = 64  #: betting fractions c = 1/GRID, 2/GRID, ..., 1, weighted in proportion to c
MAX_MORE = 100_000  #: more_needed when the observed effect sits on the threshold (no extrapolation decides)
_C = np.arange(1, GRID + 1, dtype=float) / GRID
_LOGW = np.log(_C / _C.sum())  # prior weight of each fraction: bold bets favoured (few flips are the norm)
_NEG = -1e30  # stands for log(0): finite, so that a zero weight times it is 0, not nan
_STEPS = 128  # grid points per refinement of a bound
#: one error level for both bounds, or (the lower bound's, the upper bound's): e.g. a PASS side at the policy's
#: alpha and a FAIL side at its share of a variant's family (evalsuite.gate.family)
Levels = float | tuple[float, float]


def _sides(alpha: Levels) -> tuple[float, float]:
    return alpha if isinstance(alpha, tuple) else (alpha, alpha)


def log_capital_per_c(values: np.ndarray, weights: np.ndarray, m: float, upper: bool = False) -> np.ndarray:
    """log K_n(m, c) of every betting fraction c of the grid, shape (..., GRID), without the mixture weights.

    Products of these over independent groups (tasks) at the same c are still supermartingales under the
    null, which is what ``evalsuite.stats.pooled`` sums."""
    v = np.asarray(values, dtype=float)
    w = np.asarray(weights, dtype=float)
    if upper:
        v, m = 1.0 - v, 1.0 - m
    if m <= 0.0:  # "mean <= 0" is refuted by any positive observation, never by zeros
        hit = np.where((w * (v > 0)).sum(axis=-1) > 0, np.inf, 0.0)
        return np.repeat(hit[..., None], GRID, axis=-1)
    with np.errstate(divide="ignore"):
        logf = np.log(np.maximum(1.0 - _C[:, None] + _C[:, None] * v[None, :] / m, 0.0))  # (GRID, k)
    return w @ np.maximum(logf, _NEG).T  # (..., GRID)


def mix(per_c: np.ndarray) -> np.ndarray:
    """The mixture over betting fractions: log sum_c prior(c) K_n(m, c), from ``log_capital_per_c``."""
    return _logsumexp(per_c + _LOGW)


def _logsumexp(x: np.ndarray) -> np.ndarray:
    """log sum exp over the last axis (+inf where an entry is +inf). scipy's takes 8.5x as long on one grid of 64
    (measured side by side), and the gate evaluates thousands per variant (every bound, every estimate)."""
    x = np.asarray(x, dtype=float)
    top = x.max(axis=-1)
    finite = np.isfinite(top)
    shift = np.where(finite, top, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        out = shift + np.log(np.exp(x - shift[..., None]).sum(axis=-1))
    return np.where(finite, out, top)


def log_capital(values: np.ndarray, weights: np.ndarray, m: float, upper: bool = False) -> np.ndarray:
    """log of the mixture capital betting that the mean exceeds ``m`` (``upper``: that it is below ``m``).

    ``weights`` has shape (..., k) for k ``values``; the result has shape (...).
    """
    return mix(log_capital_per_c(values, weights, m, upper))


def rejects(values: np.ndarray, weights: np.ndarray, m: float, upper: bool = False,
            alpha: float = ALPHA) -> np.ndarray:
    """Whether the sequence has excluded ``m`` from below (``upper``: from above), per batch row."""
    return log_capital(values, weights, m, upper) >= math.log(1.0 / alpha)


def _grid_log_capital(v: np.ndarray, w: np.ndarray, ms: np.ndarray) -> np.ndarray:
    """log capital (betting on "mean > m") at each m of ``ms`` (all > 0), for unbatched weights."""
    with np.errstate(divide="ignore"):
        logf = np.log(np.maximum(1.0 - _C[None, :, None] + _C[None, :, None] * v / ms[:, None, None], 0.0))
    return mix(np.maximum(logf, _NEG) @ w)  # (M,)


def lower_bound(values: np.ndarray, weights: np.ndarray, alpha: float = ALPHA) -> float:
    """The largest m in [0, 1] excluded from below (0.0 when none is): a (1 - alpha) lower confidence sequence.

    The capital is decreasing in m, so the excluded set is an interval (0, L]; a bracketing search on
    grids of 128 returns a value at most 1e-10 below L (on the safe side). A pure function of its inputs: with few
    distinct values (binary and graded scores; the gate's slices and sides repeat their counts) it is cached by
    their bytes.
    """
    v, w = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    key = (v.tobytes(), w.tobytes(), v.shape, w.shape, float(alpha))
    return _lower_bound_few(*key) if v.size <= _CACHED_VALUES else _lower_bound(*key)


_CACHED_VALUES = 32  #: ``lower_bound`` caches inputs of at most this many values (4,096 of them, ~1 KB each)


@lru_cache(maxsize=4096)
def _lower_bound_few(*key: Any) -> float:
    """``_lower_bound``, cached."""
    return _lower_bound(*key)


def _lower_bound(v_bytes: bytes, w_bytes: bytes, v_shape: tuple[int, ...], w_shape: tuple[int, ...],
                 alpha: float) -> float:
    """``lower_bound`` of the float64 arrays these bytes hold."""
    v, w = np.frombuffer(v_bytes).reshape(v_shape), np.frombuffer(w_bytes).reshape(w_shape)
    thr = math.log(1.0 / alpha)
    lo, hi = 0.0, 1.0
    if w.sum() <= 0:
        return 0.0
    while hi - lo > 1e-10:
        ms = lo + (hi - lo) * np.arange(1, _STEPS + 1) / _STEPS
        k = _rejected(v, w, ms, thr)
        lo, hi = (ms[k - 1] if k else lo), ms[k]
    return float(lo)


_STRIDE = 16  #: ``_rejected`` first tests every 16th point of a grid, then the 15 of the segment that crosses


def _rejected(v: np.ndarray, w: np.ndarray, ms: np.ndarray, thr: float) -> int:
    """How many points of the increasing grid ``ms`` the capital rejects (at least ``thr``): it is decreasing in m,
    so they come first, and ``ms[-1]`` (the bracket's top, never rejected) ends them. The count of all 128 at once,
    from every 16th point and then the 15 points below the first of those not rejected."""
    coarse = int((_grid_log_capital(v, w, ms[_STRIDE - 1::_STRIDE]) >= thr).sum())
    start = coarse * _STRIDE
    return start + int((_grid_log_capital(v, w, ms[start:start + _STRIDE - 1]) >= thr).sum())


def mean_cs(values: np.ndarray, weights: np.ndarray, alpha: Levels = ALPHA) -> tuple[float, float]:
    """(lower, upper) anytime-valid bounds on the mean of observations in [0, 1], each at its level; (0, 1)
    without data."""
    v, (lo, hi) = np.asarray(values, dtype=float), _sides(alpha)
    return lower_bound(v, weights, lo), 1.0 - lower_bound(1.0 - v, weights, hi)


def diff_values(diffs: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Paired differences in [-1, 1] (clipped) as distinct values y = (1 + d) / 2 and their counts."""
    d = np.clip(np.asarray(diffs, dtype=float), -1.0, 1.0)
    return np.unique((1.0 + d) / 2.0, return_counts=True)


def flip_values(right_to_wrong: int, wrong_to_right: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Binary paired outcomes as values of y = (1 + d) / 2: d = -1, 0, +1 with their counts."""
    return np.array([0.0, 0.5, 1.0]), np.array([right_to_wrong, n - right_to_wrong - wrong_to_right,
                                                wrong_to_right], dtype=float)


def diff_cs(values: np.ndarray, weights: np.ndarray, alpha: Levels = ALPHA) -> tuple[float, float]:
    """Anytime-valid (lower, upper) bounds on the mean paired difference, in difference units [-1, 1]."""
    lo, hi = mean_cs(values, weights, alpha)
    return 2.0 * lo - 1.0, 2.0 * hi - 1.0


def proportion_cs(k: int, n: int, alpha: Levels = ALPHA) -> tuple[float, float]:
    """Anytime-valid (lower, upper) bounds on a proportion from k successes in n trials."""
    return mean_cs(np.array([0.0, 1.0]), np.array([n - k, k], dtype=float), alpha)


def decided(values: np.ndarray, weights: np.ndarray, m: float, alpha: Levels = ALPHA) -> np.ndarray:
    """Whether the mean is known to be above or below ``m`` (either bound excludes it), per batch row.
    ``alpha``: both bounds' level, or (the lower bound's, the upper bound's) (``Levels``)."""
    lo, hi = _sides(alpha)
    return rejects(values, weights, m, False, lo) | rejects(values, weights, m, True, hi)


def more_needed(values: np.ndarray, weights: np.ndarray, m: float, alpha: Levels = ALPHA,
                cap: int = MAX_MORE) -> int:
    """About how many more observations would decide "mean vs m" if the observed ones kept their mix.

    Extrapolation: the sample seen so far is replicated to N observations (every count scaled by N / n, so
    the log-capital of each bet scales by N / n); the estimate is the smallest such N that excludes ``m``,
    minus n. At least 1; ``cap`` when even ``cap`` more would not decide (the observed mean sits on m).
    ``alpha`` as in ``decided``: each side is priced at the level that decides it.
    """
    w = np.asarray(weights, dtype=float)
    n = float(w.sum())
    if n <= 0:
        return cap
    if decided(values, w, m, alpha):
        return 0

    return extra_to_decide(n, cap, lambda total: bool(decided(values, w * (total / n), m, alpha)))


def extra_to_decide(n: float, cap: int, ok: Callable[[int], bool]) -> int:
    """The smallest number of observations beyond ``n`` at which ``ok(total)`` holds (``ok`` is monotone in the
    total: doubling, then bisection); at least 1, ``cap`` when even ``cap`` more would not do."""
    lo, hi = int(n), int(n) + 1
    while not ok(hi):
        lo, hi = hi, 2 * hi
        if hi - n > cap:
            return cap
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return max(1, hi - int(n))
