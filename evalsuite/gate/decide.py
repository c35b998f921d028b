"""The gate as a sequential run's decision function (``evalsuite.core.decision``): after each task and round the
stored run is gated as ``evalsuite gate`` gates it, and every open check says how many more pairs it needs. With
tenants (``evalsuite run --tenants``), the run is also gated under each tenant's policy and the decisions are joined
(``joint``): a check any of them leaves open is open, so the budget goes to the tenants' open checks too."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Callable

from evalsuite.core.costs import pooled_samples, task_samples
from evalsuite.core.decision import Decide, Decision
from evalsuite.store.sqlite import Store
from evalsuite.gate.policy import Policy
from evalsuite.gate.store_gate import StoreGate
from evalsuite.gate.types import POOLED, CheckResult, GateResult, heads_to_fail
from evalsuite.gate.verdict import undecided


def store_decider(policy: Policy | Path | None = None, tenants: Sequence[Policy] = ()) -> Decide:
    """A ``Decide`` that gates the stored run with ``policy`` (a parsed ``Policy``; a file or None, the shipped one,
    is parsed here, once) and, joined to it, under each of the ``tenants``' policies. Each call recomputes only
    the (variant, task) statistics whose rows changed since the last (``gate.store_gate.StoreGate``)."""
    gate = StoreGate(policy, tenants)

    def decide(store: Store) -> Decision:
        gated = gate(store)
        return joint([decision(gated.gate)] + [decision(gated.under(p)) for p in tenants])

    return decide


def _union(maps: Sequence[Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    """variant -> task -> pairs, over every map: the least positive estimate (0 where none has one)."""
    out: dict[str, dict[str, int]] = {}
    for m in maps:
        for v, tasks in m.items():
            for t, n in tasks.items():
                have = out.setdefault(v, {}).get(t)
                out[v][t] = n if have is None else (min(have, n) if have and n else have or n)
    return out


def joint(decisions: Sequence[Decision]) -> Decision:
    """One decision from several policies' (the run's first): a (variant, task) any leaves open is open; a variant
    is FAIL only when it FAILs under every policy, INCONCLUSIVE while any leaves it open, else as the first says."""
    if len(decisions) == 1:
        return decisions[0]
    open_ = _union([d.open for d in decisions])
    verdicts = {}
    for v, first in decisions[0].verdicts.items():
        every = [d.verdicts.get(v, first) for d in decisions]
        verdicts[v] = "FAIL" if all(x == "FAIL" for x in every) else "INCONCLUSIVE" if v in open_ else first
    return Decision(verdicts, open_, _union([d.failing for d in decisions]), _union([d.pooled for d in decisions]))


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
    (``more_needed``), priced by ``core.costs``: a slice check's estimate scaled from its own pairs to the task's
    (``task_samples``: a slice with a third of the samples needs three task samples per pair), the pooled check's
    shared out over its tasks by their pairs (``pooled_samples``).
    The quickest, not the slowest: one check's FAIL decides the variant, and a PASSed check leaves the others to
    be re-estimated next round."""
    mine = [c for c in gate.checks if c.variant == variant and c.verdict == "INCONCLUSIVE" and c.more_needed
            and among(c)]
    task_n = max((c.n for c in gate.checks if c.variant == variant and c.task == task), default=0)
    needs = [task_samples(c.more_needed, c.n, task_n) for c in mine if c.task == task]
    for c in mine:
        share = dict(c.pools).get(task) if c.task == POOLED else None
        if share and c.n:
            needs.append(pooled_samples(c.more_needed, share, c.n))
    return min(needs, default=0)
