"""What deciding costs: the one module that prices a decision, in samples and in seconds, for the gate's decision
(``gate.decide``: the samples of a task an open check needs, ``task_samples``, ``pooled_samples``), the scheduler
(``run.schedule`` and ``run.rounds``: what a want, a draw or a chunk costs, ``RunCosts``) and the report
(``report.deciding``: "≈+N samples to decide, ~M min of budget", ``decision_seconds``), so all three count the same
samples and seconds. Pure and torch-free.

A check's ``more_needed`` counts its own pairs: a slice check's are scaled to the task's samples, and a pooled
check's shared over its tasks. Those samples cost the variant its seconds per pair and the baseline its seconds per
new sample past the prefix of the stream a stored baseline (``run.baselines``) holds, shared by the variants drawing
them: measured in this run once it has ``MIN_MEASURED`` samples, else as the stored baseline's manifest recorded
where they were generated. ``RunCosts`` holds a run's measured costs and what its stored baseline holds, and is what
the run's meta records (``to_state``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from evalsuite.store.state import RunState


@dataclass(frozen=True)
class StoredBaseline:
    """What a stored baseline holds of a task (``run.baselines.BaselineSource.held``): the stream's first ``held``
    samples, answered at ``seconds`` per sample where they were generated (0.0: not recorded)."""

    held: int = 0
    seconds: float = 0.0


#: an unmeasured (variant, task) is priced at this many times the variant's dearest measured task: pricing it at
#: nothing let a first needle look start with no budget left; at twice (needle's ratio to json on a Zen 1) the
#: scheduler simulation put code's first look (really ~0.9x json) out of reach of a 9-minute budget. The first
#: chunk of an unmeasured task is a 4-sample probe (run.rounds.PROBE) and later chunks are cut to what is left.
UNMEASURED_FACTOR = 1.0

#: pairs below which a measured seconds-per-sample is not trusted over a recorded one: a budget that runs out
#: mid-batch leaves a few rows that carried a whole batch's time (17 s for one json sample)
MIN_MEASURED = 8


def measured_rate(cost: Sequence[float] | None) -> float | None:
    """Seconds per sample of a ``[seconds, samples]`` cost, None below ``MIN_MEASURED`` samples."""
    return cost[0] / cost[1] if cost and cost[1] >= MIN_MEASURED else None


def baseline_rate(stored: StoredBaseline, cost: Sequence[float] | None) -> float:
    """The baseline's seconds per new sample: its ``[seconds, samples]`` ``cost`` measured in this run (from
    ``MIN_MEASURED`` samples on), else what ``stored`` recorded, else whatever was measured (0.0: nothing known)."""
    return measured_rate(cost) or stored.seconds or (cost[0] / cost[1] if cost and cost[1] else 0.0)


def task_samples(more: int, n: int, task_n: int) -> int:
    """Samples of a task that ``more`` pairs of a check over ``n`` of the task's ``task_n`` paired samples take:
    a slice holding a third of them needs three task samples per pair (a task-wide check: ``more`` itself)."""
    return -(-more * task_n // n) if n and task_n > n else more


def pooled_samples(more: int, share: int, n: int) -> int:
    """A pooled check's ``more`` pairs (over ``n`` pooled pairs), the share of a task holding ``share`` of them."""
    return -(-more * share // n)


def baseline_new(k: int, drawn: int, held: int) -> int:
    """Of the next ``k`` samples of a task after ``drawn``, those past the ``held`` a stored baseline answers: the
    ones the baseline generates (a run draws each stream in its fixed order, so what is stored is a prefix of it)."""
    return max(0, min(k, drawn + k - held))


def decision_seconds(pairs: int, own: float, base: float, drawn: int = 0, held: int = 0, sharing: int = 1) -> float:
    """Seconds ``pairs`` more pairs of a task cost a variant: its own at ``own`` seconds a pair, plus its share (one
    of ``sharing`` variants drawing them) of the baseline's new samples (``baseline_new``) at ``base`` seconds each."""
    return pairs * own + baseline_new(pairs, drawn, held) * base / max(sharing, 1)


@dataclass
class RunCosts:
    """A sequential run's costs: measured ``[seconds, pairs]`` per ``"variant/task"`` (``pairs``) and what a stored
    baseline holds per task (``stored``)."""

    pairs: dict[str, list[float]] = field(default_factory=dict)
    stored: dict[str, StoredBaseline] = field(default_factory=dict)

    @classmethod
    def from_state(cls, state: "RunState") -> "RunCosts":
        """The costs a run's meta recorded (``to_state``)."""
        return cls({k: list(v) for k, v in state.round_costs.items()},
                   {t: StoredBaseline(int(h), float(s)) for t, (h, s) in state.baseline_stored.items()})

    def to_state(self) -> dict[str, Any]:
        """The RunState fields that record these costs."""
        return {"round_costs": self.pairs,
                "seconds_per_pair": {k: round(s / n, 3) for k, (s, n) in self.pairs.items() if n},
                "baseline_stored": {t: [b.held, b.seconds] for t, b in self.stored.items()}}

    def add(self, name: str, task: str, seconds: float, pairs: int) -> None:
        """Count ``pairs`` new pairs of ``name`` on ``task`` that took ``seconds``."""
        cost = self.pairs.setdefault(f"{name}/{task}", [0.0, 0])
        cost[0], cost[1] = cost[0] + seconds, cost[1] + pairs

    def per_pair(self, name: str, task: str) -> float:
        """Measured seconds per pair of ``name`` on ``task`` (0.0 when not measured: a stored baseline, a copy)."""
        seconds, pairs = self.pairs.get(f"{name}/{task}", (0.0, 0))
        return seconds / pairs if pairs else 0.0

    def expected(self, name: str, task: str) -> float:
        """Seconds per pair of ``name`` on ``task`` to plan with: measured, else ``UNMEASURED_FACTOR`` times its
        dearest measured task (0.0 when nothing of it is measured)."""
        measured = self.per_pair(name, task)
        if measured > 0:
            return measured
        others = [s / n for k, (s, n) in self.pairs.items() if n and k.rsplit("/", 1)[0] == name]
        return UNMEASURED_FACTOR * max(others, default=0.0)

    def held(self, task: str) -> int:
        """Samples of ``task`` a stored baseline answers (a prefix of its stream)."""
        return self.stored.get(task, StoredBaseline()).held

    def base_rate(self, task: str, base: str) -> float:
        """The baseline ``base``'s seconds per sample past the stored ones (``baseline_rate``)."""
        return baseline_rate(self.stored.get(task, StoredBaseline()), self.pairs.get(f"{base}/{task}"))

    def base_plan_rate(self, task: str, base: str) -> float:
        """The baseline's seconds per new sample to plan with: ``base_rate``; nothing measured or recorded, the
        prior (``expected``): a warm run with a new candidate plans its draws past the stored samples at what they
        will cost, not at nothing."""
        rate = self.base_rate(task, base)
        if rate == 0.0 and not self.stored.get(task, StoredBaseline()).seconds and self.per_pair(base, task) == 0.0:
            rate = self.expected(base, task)
        return rate

    def base_seconds(self, task: str, k: int, drawn: int, base: str) -> float:
        """Seconds the baseline takes to answer the next ``k`` samples of ``task`` after ``drawn``: those past what
        a stored baseline holds (``baseline_new``), at ``base_plan_rate``."""
        return baseline_new(k, drawn, self.held(task)) * self.base_plan_rate(task, base)

    def need_seconds(self, variant: str, task: str, pairs: int, sharing: int, base: str, drawn: int) -> float:
        """Seconds ``pairs`` more pairs of ``variant`` on ``task`` cost (after ``drawn`` samples), its own plus its
        share of the baseline's (``decision_seconds``: the baseline answers a sample once for the ``sharing``
        variants that need it)."""
        return decision_seconds(pairs, self.expected(variant, task), self.base_plan_rate(task, base), drawn,
                                self.held(task), sharing)
