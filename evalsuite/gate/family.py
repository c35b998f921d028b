"""A variant's false-FAIL guarantee: the checks that can FAIL it, and the error level each one FAILs at.

A variant FAILs when any of its checks FAILs, so its false-FAIL rate is that of a union. Under ``family_alpha``
(the default) check k FAILs only when its betting capital against "within tolerance" reaches 1 / (alpha * w_k):
its anytime-valid bound on the FAIL side is taken at level alpha * w_k, with weights w_k fixed before any data
(from the policy and the variant's task list) and summing to 1. Each capital is a nonnegative supermartingale
while its check's tolerance holds, so by Ville's inequality and a union bound (weighted Bonferroni on e-processes)

    P(some check of a variant within every tolerance ever FAILs) <= sum_k alpha * w_k = alpha,

whatever the number of tasks, slices and checks, at any stopping time, and a FAIL still names its check.
``per_check`` keeps every check at alpha (the variant's risk grows with its checks; for comparison).

The family of a variant: on every task of its list (the run's expected tasks, those with samples, the policy's
required ones) and on each row of it the policy gates (``all`` and each selector slice), every enabled
``max_drop``, ``min_recovery``, ``max_flip_rate`` (held on every task: whether a task is binary is only known from
its samples), ``max_kld`` (held whether or not the run measures KLD), ``min_score`` and
``metric:NAME:max_drop|max_rise``; and the pooled check when two or more tasks have a ``max_drop``. A row or task
without samples yet holds its share. Every check that can FAIL a variant is in it (``gate.means``: max_kld and
min_score are sequences too), so the guarantee ``describe`` prints holds for every FAIL. The PASS side needs every
check to PASS (intersection-union), so a false PASS stays <= alpha per check at alpha. The pooled check holds
``POOLED_SHARE`` of alpha (it carries the power against a variant that loses a little everywhere), the other checks
share the rest equally. docs/gate.md.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from evalsuite.gate.policy import FAMILY_ALPHA, Policy, Thresholds
from evalsuite.gate.pooled import CHECK as POOLED_CHECK
from evalsuite.gate.types import POOLED as POOLED_TASK
from evalsuite.stats.types import ALL

POOLED_SHARE = 0.5  #: the pooled check's share of alpha when the variant has one
#: a check's weight against the other non-pooled checks, by check name (1 where not named; the simulation's sweep
#: of weights sets it): the shares are fixed before any data
RELATIVE: dict[str, float] = {}
Key = tuple[str, str, str]  #: (task, slice, check)


#: the checks of a row that can FAIL, besides its metric checks: every one is an anytime-valid sequence in the family
CHECKS = ("max_drop", "min_recovery", "max_flip_rate", "max_kld", "min_score")


def fail_capable(th: Thresholds) -> list[str]:
    """The checks of one gated row that can FAIL (what a variant's alpha is shared over): every enabled one."""
    plain = [name for name in CHECKS if getattr(th, name) is not None]
    return plain + [f"metric:{name}:{kind}" for (name, kind), t in th.metrics if t is not None]


@dataclass(frozen=True)
class Family:
    """The FAIL-capable checks of one variant and the level each one FAILs at."""

    alpha: float
    mode: str  # family_alpha | per_check
    levels: Mapping[Key, float] = field(default_factory=dict)

    def level(self, task: str, slice_name: str, check: str) -> float:
        """The FAIL side's error level of one check (alpha under ``per_check``)."""
        if self.mode != FAMILY_ALPHA:
            return self.alpha
        return self.levels[(task, slice_name, check)]

    def describe(self) -> str:
        """One line for the report, e.g. 'false FAIL ≤ 5% per variant (family-wise over 11 checks)'."""
        k, a = len(self.levels), _pct(self.alpha)
        if self.mode == FAMILY_ALPHA:
            pooled = f", the pooled check at {_pct(self.levels[(POOLED_TASK, ALL, POOLED_CHECK)])}" \
                if (POOLED_TASK, ALL, POOLED_CHECK) in self.levels else ""
            return f"false FAIL ≤ {a} per variant (family-wise over {k} checks{pooled})"
        return f"false FAIL ≤ {a} per check, up to {_pct(min(1.0, k * self.alpha))} per variant over {k} checks"


def family(policy: Policy, tasks: Sequence[str]) -> Family:
    """The family of a variant gated on ``tasks`` (its list, fixed before any outcome) under ``policy``."""
    keys: list[Key] = []
    dropped = 0
    for task in tasks:
        rows = [(ALL, policy.thresholds(task))] + [(r.name, policy.thresholds(task, r)) for r in policy.slices(task)]
        keys += [(task, name, check) for name, th in rows for check in fail_capable(th)]
        dropped += policy.thresholds(task).max_drop is not None
    pooled = dropped >= 2  # then keys holds those max_drop checks: the rest is never empty
    share = POOLED_SHARE if pooled else 0.0
    weight = {k: RELATIVE.get(k[2].split(":")[0], 1.0) for k in keys}
    total = sum(weight.values())
    levels = {k: policy.alpha * (1.0 - share) * w / total for k, w in weight.items()}
    if pooled:
        levels[(POOLED_TASK, ALL, POOLED_CHECK)] = policy.alpha * share
    return Family(policy.alpha, policy.false_fail, levels)


def _pct(x: float) -> str:
    """A level as a percentage: 5%, 0.25%, 0.227%."""
    return f"{100 * x:.3g}%"


def level_note(side: str, level: float, alpha: float) -> str:
    """' (upper at 0.25%)' where a check's FAIL side is below the policy's alpha; '' where it is alpha."""
    return "" if abs(level - alpha) < 1e-15 else f" ({side} at {_pct(level)})"
