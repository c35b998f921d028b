"""The gate as a sequential run's decision function (``evalsuite.core.decision``): after each task and round the
stored run is gated as ``evalsuite gate`` gates it, and every open check says how many more pairs it needs."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from evalsuite.core.decision import Decide, Decision
from evalsuite.core.store import Store
from evalsuite.gate.pooled import POOLED
from evalsuite.gate.store_gate import gate_store
from evalsuite.gate.types import CheckResult, GateResult, heads_to_fail, task_samples
from evalsuite.gate.verdict import undecided


def store_decider(policy: Path | None = None) -> Decide:
    """A ``Decide`` that gates the stored run with ``policy`` (default: the shipped one)."""

    def decide(store: Store) -> Decision:
        return decision(gate_store(store, policy).gate)

    return decide


def decision(gate: GateResult) -> Decision:
    """The verdicts, and per undecided (variant, task) the pairs its quickest open check needs (and, apart, its
    quickest check heading to a FAIL)."""
    tasks_of = undecided(gate)
    open_ = {v: {t: pairs_to_decide(gate, v, t) for t in tasks} for v, tasks in tasks_of.items()}
    failing = {v: {t: n for t in tasks if (n := pairs_to_decide(gate, v, t, leans_fail))}
               for v, tasks in tasks_of.items()}
    return Decision(dict(gate.variant_verdicts), open_, {v: t for v, t in failing.items() if t},
                    pooled_failing(gate))


def pooled_failing(gate: GateResult) -> dict[str, dict[str, int]]:
    """variant -> task -> pairs of that task alone its open pooled check needs, when that check heads to a FAIL
    (observed mean margin below its threshold 0), for the pooled tasks whose own ``max_drop`` check heads to a
    FAIL: drawing them moves the pooled bound towards the FAIL it heads to (``CheckResult.needs_from``)."""
    out: dict[str, dict[str, int]] = {}
    beyond = {(c.variant, c.task) for c in gate.checks
              if c.check == "max_drop" and c.slice == "all" and heads_to_fail(c.check, c.observed, c.threshold)}
    for c in gate.checks:
        if (c.task == POOLED and c.verdict == "INCONCLUSIVE" and c.more_needed and c.observed < c.threshold
                and gate.variant_verdicts.get(c.variant) != "FAIL"):
            tasks = {t: n for t, n in c.needs_from if (c.variant, t) in beyond}
            if tasks:
                out[c.variant] = tasks
    return out


def leans_fail(check: CheckResult) -> bool:
    """Whether an open per-task check's observed value is already beyond its threshold (its estimate heads to a
    FAIL). The pooled check is not counted: its need is shared over every task it pools, and pairs of a task
    whose own margin is above the pooled mean pull its bound away from a FAIL, not towards it."""
    return check.task != POOLED and heads_to_fail(check.check, check.observed, check.threshold)


def pairs_to_decide(gate: GateResult, variant: str, task: str,
                    among: Callable[[CheckResult], bool] = lambda c: True) -> int:
    """Samples of ``task`` after which its quickest open check (of those ``among`` selects) would decide
    (``more_needed``), a slice check's estimate scaled from its own pairs to the task's (a slice with a third of
    the samples needs three task samples per pair), the pooled check's shared out over its tasks by their pairs.
    The quickest, not the slowest: one check's FAIL decides the variant, and a PASSed check leaves the others to
    be re-estimated next round."""
    mine = [c for c in gate.checks if c.variant == variant and c.verdict == "INCONCLUSIVE" and c.more_needed
            and among(c)]
    task_n = max((c.n for c in gate.checks if c.variant == variant and c.task == task), default=0)
    needs = [task_samples(c.more_needed, c.n, task_n) for c in mine if c.task == task]
    for c in mine:
        share = dict(c.pools).get(task) if c.task == POOLED else None
        if share and c.n:
            needs.append(-(-c.more_needed * share // c.n))
    return min(needs, default=0)
