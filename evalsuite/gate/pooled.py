"""The pooled early FAIL: one check per variant over every task it ran (evalsuite.stats.pooled).

Each task enters with its own ``max_drop`` t (reasoning's 0.10 stays 0.10); the check FAILs when the anytime
upper bound U on the worst task's margin Δ + t is below 0 (some task is beyond its tolerance; the tasks with
the lowest observed margins are named, not labelled FAILed). It never PASSes a variant on its own: it is
PASS only when every task's own max_drop check PASSed (then no task can be beyond its tolerance), else
INCONCLUSIVE with ``more_needed`` (pairs over all tasks, shared out by the runner in proportion to each
task's pairs). A variant with fewer than two such tasks gets no pooled check: it would repeat the task's own.
"""
from __future__ import annotations

from collections.abc import Sequence

from evalsuite.gate.types import POOLED, CheckResult, Verdict
from evalsuite.stats import pooled
from evalsuite.stats.slices import paired_values
from evalsuite.stats import sequential as seq
from evalsuite.stats.types import ALL, PairedStats

CHECK = "pooled_max_drop"
_SHOWN = 3  # tasks named in the reason


def part(st: PairedStats, t: float) -> pooled.Part:
    """A task's pairs as the pooled bets see them: distinct y = (1 + d) / 2 with counts, and its tolerance."""
    vw = paired_values(st)
    values, weights = vw if vw is not None else seq.flip_values(st.flips_right_to_wrong, st.flips_wrong_to_right,
                                                                 st.n)
    return values, weights, t


def _pulling(rows: Sequence[tuple[PairedStats, float]]) -> str:
    """The tasks with the lowest observed margin Δ + t, lowest first (those below 0 first of all)."""
    ranked = sorted(rows, key=lambda r: r[0].delta + r[1])
    shown = [f"{st.task} {st.delta + t:+.3f}" for st, t in ranked[:_SHOWN] if st.delta + t < 0]
    return ", ".join(shown) or "none below 0"


def pooled_check(variant: str, rows: Sequence[tuple[PairedStats, float]], tasks_passed: bool,
                 level: float = seq.ALPHA, alpha: float = seq.ALPHA) -> CheckResult | None:
    """The pooled check of ``variant`` from its tasks' ``all`` rows with their max_drop; None under two tasks.
    ``tasks_passed``: every task's own max_drop check PASSed. ``level``: the error level it FAILs at (its share of
    the variant's ``alpha``, evalsuite.gate.family)."""
    rows = [(st, t) for st, t in rows if st.slice == ALL and st.n > 0]
    if len(rows) < 2:
        return None
    parts = [part(st, t) for st, t in rows]
    n = sum(st.n for st, _ in rows)
    upper, margin = pooled.upper_bound(parts, level), pooled.mean_margin(parts)
    verdict: Verdict = "FAIL" if upper < 0 else "PASS" if tasks_passed else "INCONCLUSIVE"
    more = pooled.more_needed(parts, level) if verdict == "INCONCLUSIVE" else None
    more = None if more is not None and more >= seq.MAX_MORE else more
    word = {"FAIL": "< 0: a task is beyond its max_drop", "PASS": ">= 0, and every task PASSed its own check",
            "INCONCLUSIVE": ">= 0: no task shown beyond its max_drop yet"}[verdict]
    informative = sum(st.n_informative or 0 for st, _ in rows)
    tail = f"; ~{more} more pairs over all tasks to decide" if more else ""
    at = "" if abs(level - alpha) < 1e-15 else f" (at {100 * level:.3g}%)"
    reason = (f"pooled over {len(rows)} tasks: mean Δ+max_drop {margin:+.3f}, CS upper {upper:+.3f}{at} {word}; "
              f"lowest: {_pulling(rows)} (n={n}, {informative} with a side right){tail}")
    return CheckResult(variant, POOLED, ALL, CHECK, 0.0, margin, verdict, reason, (-1.0, upper), n, more,
                       tuple((st.task, st.n) for st, _ in rows), _needs_from(rows, parts, level) if more else (),
                       alpha=level)


def _needs_from(rows: Sequence[tuple[PairedStats, float]], parts: Sequence[pooled.Part],
                level: float) -> tuple[tuple[str, int], ...]:
    """Per pooled task beyond its own tolerance (Δ + t < 0), the pairs of it alone that would decide the check
    (those out of reach, ``MAX_MORE``, left out): a run draws them from whichever is cheapest."""
    needs = ((st.task, pooled.more_needed_from(parts, k, level))
             for k, (st, t) in enumerate(rows) if st.delta + t < 0)
    return tuple((task, n) for task, n in needs if n < seq.MAX_MORE)
