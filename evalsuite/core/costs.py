"""What the baseline's answers cost a sequential run: pure functions, shared by the planner (``run.rounds``, which
sizes draws with them) and the report (``report.digest``, which prices "≈+N samples to decide" with them), so both
count the same seconds. Torch-free.

A stored baseline (``run.baselines``) holds a prefix of each task's stream: those samples cost the baseline
nothing; the ones past it cost its seconds per sample, as measured in this run once it has ``MIN_MEASURED``
samples, else as the stored baseline's manifest recorded where they were generated. ``RunCosts`` holds a run's
measured costs and what its stored baseline holds, and is what the run's meta records (``to_state``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from evalsuite.core.state import RunState


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


def baseline_seconds(k: int, drawn: int, stored: StoredBaseline, cost: Sequence[float] | None) -> float:
    """Seconds the baseline takes to answer the next ``k`` samples of a task after ``drawn``: nothing for those
    within the ``stored.held`` a stored baseline answers (a run draws each stream in its fixed order, so what is
    stored is a prefix of it), the rest at ``baseline_rate``."""
    return max(0, min(k, drawn + k - stored.held)) * baseline_rate(stored, cost)


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

    def base_seconds(self, task: str, k: int, drawn: int, base: str) -> float:
        """Seconds the baseline takes to answer the next ``k`` samples of ``task`` after ``drawn``
        (``baseline_seconds``): a warm run with a new candidate plans its draws past the stored samples at what
        they will cost, not at nothing."""
        stored = self.stored.get(task, StoredBaseline())
        seconds = baseline_seconds(k, drawn, stored, self.pairs.get(f"{base}/{task}"))
        if seconds == 0.0 and k > 0 and not stored.seconds and self.per_pair(base, task) == 0.0:
            seconds = max(0, min(k, drawn + k - stored.held)) * self.expected(base, task)  # unmeasured: a prior
        return seconds

    def need_seconds(self, variant: str, task: str, pairs: int, sharing: int, base: str, drawn: int) -> float:
        """Seconds ``pairs`` more pairs of ``variant`` on ``task`` cost (after ``drawn`` samples): its own, plus its
        share of the baseline's (the baseline answers a sample once for the ``sharing`` variants that need it)."""
        return pairs * self.expected(variant, task) + self.base_seconds(task, pairs, drawn, base) / max(sharing, 1)
