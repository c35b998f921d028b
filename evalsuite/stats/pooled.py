"""One anytime-valid sequence over several tasks: is some task worse than its tolerance? (pure numpy/scipy)

Task k contributes its paired differences d in [-1, 1] and its tolerance t_k (``max_drop``); its margin is
z = d + t_k, whose mean mu_k = Delta_k + t_k is >= 0 exactly when the task is within its tolerance. Against a
candidate m, the gambler of ``sequential`` bets the same fraction c on every pair of every task that the mean
margin is below m:

    K_n(m, c) = prod_k prod_i (1 - c + c (1 - y_ki) / (1 - m_k)),   y = (1 + d) / 2,  m_k = (1 + m - t_k) / 2

Each factor is >= 0 and, when mu_k >= m, has conditional expectation <= 1 whatever task the pair came from
and whatever was seen before (the pair's sample was fixed by the stream before its outcome was known). So
under "every task has mu_k >= m" the mixture over c is a nonnegative supermartingale on the interleaved
sequence of all pairs, in any order the runner chose, and Ville's inequality bounds the chance it ever reaches
1/alpha. The m it rejects form an interval (U, inf): U is an anytime-valid upper confidence bound on
min_k mu_k, the worst task's margin. U < 0 means at least one task is beyond its tolerance: a FAIL whose
error is at most alpha however many tasks pool. Pairs weigh equally (a task weighs by its pairs); constant
bets make K depend on the per-task counts only, so a stored run re-gates to the same bound. docs/gate.md.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from evalsuite.stats import sequential as seq

#: (values y in [0, 1], their counts (..., k), the task's tolerance t) per task
Part = tuple[np.ndarray, np.ndarray, float]


def log_capital(parts: Sequence[Part], m: float) -> np.ndarray:
    """log of the mixture capital betting that every task's mean margin (Δ + t) is below ``m``."""
    per_c = sum(seq.log_capital_per_c(v, w, (1.0 + m - t) / 2.0, upper=True) for v, w, t in parts)
    return seq.mix(np.asarray(per_c))


def rejects(parts: Sequence[Part], m: float = 0.0, alpha: float = seq.ALPHA) -> np.ndarray:
    """Whether the sequence has shown that some task's margin is below ``m`` (m = 0: beyond its tolerance)."""
    return log_capital(parts, m) >= math.log(1.0 / alpha)


def upper_bound(parts: Sequence[Part], alpha: float = seq.ALPHA) -> float:
    """U: the smallest m the sequence rejects, an anytime upper bound on the worst task's margin (to 1e-6,
    on the safe side: the returned value is never below the true U by more than that)."""
    lo, hi = -1.0, 1.0 + max((t for _, _, t in parts), default=0.0)
    if not parts or not bool(rejects(parts, hi, alpha)):
        return hi
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if bool(rejects(parts, mid, alpha)) else (mid, hi)
    return float(hi)


def mean_margin(parts: Sequence[Part]) -> float:
    """The pair-weighted mean of Δ + t over all tasks' pairs (what the bets pool)."""
    num = sum(float(np.dot(w, 2.0 * np.asarray(v) - 1.0 + t)) for v, w, t in parts)
    den = sum(float(np.sum(w)) for _, w, _ in parts)
    return num / den if den else 0.0


def more_needed(parts: Sequence[Part], alpha: float = seq.ALPHA, cap: int = seq.MAX_MORE) -> int:
    """About how many more pairs, over all tasks in their present proportions, before the sequence would show
    a task beyond its tolerance if the observed mix persisted (0 if it already does; ``cap`` if it never would,
    e.g. no task's margin is negative)."""
    return _more(parts, range(len(parts)), alpha, cap)


def more_needed_from(parts: Sequence[Part], k: int, alpha: float = seq.ALPHA, cap: int = seq.MAX_MORE) -> int:
    """About how many more pairs of task ``k`` alone (its observed mix persisting, the other tasks as they stand)
    before the sequence would show a task beyond its tolerance: what a run drawing the pooled check's pairs from
    that one task needs (0 if it already shows it; ``cap`` if it never would, e.g. task k's margin is not
    negative). The cheapest task to draw is the scheduler's choice (``evalsuite.run.schedule``)."""
    return _more(parts, [k], alpha, cap)


def _more(parts: Sequence[Part], grown: Sequence[int], alpha: float, cap: int) -> int:
    """The pairs beyond those held by the tasks ``grown`` (each scaled up with its observed mix, in their present
    proportions; the other tasks as they stand) at which the sequence first rejects 0."""
    n = sum(float(np.sum(parts[k][1])) for k in grown)
    if n <= 0:
        return cap
    if bool(rejects(parts, 0.0, alpha)):
        return 0

    def ok(total: int) -> bool:
        scaled = [(v, np.asarray(w, dtype=float) * (total / n) if k in grown else w, t)
                  for k, (v, w, t) in enumerate(parts)]
        return bool(rejects(scaled, 0.0, alpha))

    return seq.extra_to_decide(n, cap, ok)
