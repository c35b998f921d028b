"""Sequential rounds: draw samples in rounds, re-gate after each, keep sampling only where undecided; the
wall-clock budget, not a sample count, ends the run.

Round 1 runs the first ``round_size`` samples of every task's stream (stratified over the task's slices, the same
samples for every variant). After each round the run is decided by the injected ``decide`` (the CLI passes
``evalsuite.gate.decide.store_decider``: the run gated as ``evalsuite gate`` would gate it). A (variant,
task) whose checks are decided stops asking for samples, a variant that FAILs stops entirely, and the next round
draws more samples only for the tasks some variant still needs (the baseline answers them; decided variants skip
them). A (variant, task) stops drawing only when its quickest open check cannot be decided in what is left: its
``more_needed`` (``Decision.open``, from ``evalsuite.gate.decide.pairs_to_decide``, which counts the variant's
pooled check as open on every task it pools) times the measured seconds per pair of that variant and task, plus
its share of the baseline's seconds per sample
(the baseline answers a sample once for all the variants that need it), exceeds the budget left; or the samples
exceed the safety cap (``max_samples``; default each stream's size, or ``DEFAULT_CAP`` for an endless one).
Draws grow geometrically (``GROWTH``, from ``round_size``), are sized to what the open checks ask for, rounded up
to whole decode batches, and cut to what the budget left affords at the measured seconds per sample; when that
cannot give every variant wanting a task its need, the variant nearest a decision draws and the others sit the
round out on that task (``draws.joining``). The run ends
when nothing is open, when no open task can grow, or when the budget is spent (no new (variant, task) starts; a
generation in progress stops after its current batch). The first round takes the tasks cheapest first (by the
seconds per sample measured in this process: a fresh process keeps the ``--tasks`` order, so list first the task
most likely to FAIL a variant, as ``make gate`` lists needle); later
rounds take, and draw, first the tasks where a check heading to a FAIL is open (``Decision.failing``), then the
rest, each by the seconds its quickest open check needs to decide (``quickest_first``), so what is left of the
budget goes where a decision is nearest. Every round is re-gated after every task, so a failing variant stops
as soon as it FAILs.
The meta says why each (variant, task) stopped (``stopped``) and what a pair cost (``seconds_per_pair``).

Why this keeps its error rates: the gate decides on anytime-valid confidence sequences (evalsuite.stats, docs/
gate.md), valid at every n simultaneously, so looking after every task and stopping on a decision, an estimate or
a budget does not inflate them; samples come in each stream's fixed order, never selected on outcomes. A re-gate
of the stored run sees exactly the pairs the run stopped with. ``--resume`` continues from ``drawn``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol, Sequence

from evalsuite.core.costs import RunCosts
from evalsuite.core.decision import Decide, Decision
from evalsuite.core.store import Store
from evalsuite.run.backend import Backend, VariantRef
from evalsuite.run.draws import DEFAULT_CAP, draw_size, joining, task_cap, whole_batches
from evalsuite.run.prepare import PreparedTask


class RoundsRunner(Protocol):
    """What Rounds uses of a Runner (``evalsuite.run.runner.Runner``)."""

    @property
    def tasks(self) -> Sequence[PreparedTask]: ...
    @property
    def store(self) -> Store: ...
    @property
    def backend(self) -> Backend: ...
    @property
    def baseline_source(self) -> Any: ...  # evalsuite.run.baselines.BaselineSource, optional

    def round(self, variants: Sequence[VariantRef], active: dict[str, set[str]], task_major: bool = False) -> None:
        ...

    def out_of_time(self) -> bool: ...
    def copies_baseline(self, variant: VariantRef) -> bool: ...
    def cost_per_sample(self, task: str) -> float | None: ...
    def set_deadline(self, deadline: float | None) -> None: ...
    def reorder(self, names: Sequence[str]) -> None: ...


@dataclass
class Rounds:
    """How a sequential run draws samples; ``drive`` runs it on a Runner."""

    max_samples: int | None = None  # safety cap per task (None: each stream's size, or DEFAULT_CAP)
    round_size: int = 16
    budget_s: float | None = None
    decide: Decide | None = None  # what is still open (evalsuite.gate.decide); needed with more than a baseline
    log: Callable[[str], None] = print
    batch_size: int = 1  # draws are rounded up to whole decode batches
    started: float = field(default_factory=time.monotonic)
    stop_reason: str = ""
    capped: dict[str, str] = field(default_factory=dict)  # task -> why it could not draw more
    out_of_reach: dict[str, dict[str, int]] = field(default_factory=dict)  # variant -> task -> pairs still needed
    stopped: dict[str, dict[str, str]] = field(default_factory=dict)  # variant -> task -> why it stopped drawing
    costs: RunCosts = field(default_factory=RunCosts)  # measured seconds per pair, what a stored baseline holds
    caps: dict[str, int] = field(default_factory=dict)  # task -> its cap
    steps: dict[str, int] = field(default_factory=dict)  # task -> its last draw
    failing: dict[str, dict[str, int]] = field(default_factory=dict)  # the last Decision.failing

    def drive(self, runner: RoundsRunner, variants: Sequence[VariantRef]) -> None:
        """Rounds until decided, capped or out of budget; the final state is stored in the run's meta."""
        tasks = {t.name for t in runner.tasks}
        active = {v.name: set(tasks) for v in variants[1:]} or {variants[0].name: set(tasks)}
        state = runner.store.state()
        n_round, source = int(state.rounds), runner.baseline_source
        self.caps = {t.name: task_cap(t, self.max_samples) for t in runner.tasks}
        held = ({t.name: source.held(t, runner.backend.settings()) for t in runner.tasks}
                if source is not None else {})
        self.costs = replace(RunCosts.from_state(state), stored=held)  # what the store holds now, not at the last run
        if self.budget_s is not None:
            runner.set_deadline(self.started + self.budget_s)
        needs: dict[str, dict[str, int]] | None = None  # after a round: variant -> task -> pairs still needed
        if n_round and len(variants) > 1:  # resumed: only what is still open (a FAILed variant has no samples due)
            active = self._still_open(runner, variants)
        self.build(runner, [v for v in variants[1:] if v.name in active])
        while True:
            n_round += 1
            if needs is None:  # later rounds are ordered (quickest_first) when they are drawn
                self.cheapest_first(runner)
            self.one_round(runner, variants, active)
            self._store(runner, n_round)
            if runner.out_of_time():
                self.stop_reason = f"budget of {self.budget_s:g} s spent"
                self._mark(active, "budget spent")
                break
            active = needs = self._still_open(runner, variants)
            if not active:
                reach = any(self.out_of_reach.values())
                self.stop_reason = "every check decided" + (" or out of reach" if reach else "")
                break
            self.quickest_first(runner, needs, variants[0].name)
            if not self.draw(runner, needs, variants[0].name):
                self.stop_reason = "sample cap reached: " + ", ".join(f"{t} ({why})" for t, why in
                                                                      sorted(self.capped.items()))
                self._mark(active, "cap reached")
                break
            self._import_baseline(runner, variants[0].name, set().union(*active.values()))
        self._store(runner, n_round)
        self.log(f"sequential run: {n_round} round(s); stopped: {self.stop_reason}")

    @staticmethod
    def build(runner: RoundsRunner, variants: Sequence[VariantRef]) -> None:
        """Build ``variants`` before any task is timed (``copies_baseline`` builds a variant to compare it with the
        baseline), so a variant's one-off build (quantizing its weights: ~1 s for w4g64 on 2 cores, quiet) is not
        counted in the seconds per pair of its first task, which would make that task look many times dearer to
        the budget's estimates than it is."""
        for variant in variants:
            runner.copies_baseline(variant)

    @staticmethod
    def cheapest_first(runner: RoundsRunner) -> None:
        """Order the tasks by their measured cost per sample (tasks not measured yet keep their place, first),
        so a budget cuts the expensive tasks and a failing variant is found on a cheap one."""
        names = [t.name for t in runner.tasks]
        runner.reorder(sorted(names, key=lambda n: (runner.cost_per_sample(n) or 0.0, names.index(n))))

    def quickest_first(self, runner: RoundsRunner, needs: dict[str, dict[str, int]], base: str) -> None:
        """After a round: order the tasks by how near a decision their samples bring a variant, so what is left
        of the budget goes there. First the tasks where a check heading to a FAIL (``Decision.failing``: its
        estimate is already beyond its threshold) is open, since one such check deciding decides the variant; then
        the rest. Within each, by the seconds the quickest open check needs to decide (``RunCosts.need_seconds``), its
        pairs rounded up to whole decode batches as draws are (needle's 6 pairs cost a batch of 32 long prompts,
        more than json's 29); a task no open variant needs goes last."""
        names = [t.name for t in runner.tasks]
        drawn = {t.name: len(t.samples) for t in runner.tasks}
        sharing = {t: sum(t in n for n in needs.values()) for t in names}

        def seconds(task: str, among: dict[str, dict[str, int]]) -> float:
            return min((self.costs.need_seconds(v, task, whole_batches(n[task], self.batch_size), sharing[task],
                                                base, drawn[task])
                        for v, n in among.items() if v in needs and task in n), default=float("inf"))

        def key(task: str) -> tuple[float, float, int]:
            fail = seconds(task, self.failing)
            return (0, fail, names.index(task)) if fail < float("inf") else (1, seconds(task, needs), names.index(task))

        runner.reorder(sorted(names, key=key))

    def one_round(self, runner: RoundsRunner, variants: Sequence[VariantRef], active: dict[str, set[str]]) -> None:
        """A round task by task: the baseline, then every open variant, each timed (seconds per pair); a variant
        the gate FAILs after a task skips the rest of the round (a FAIL on the sequences stands)."""
        base = variants[0].name
        for task in list(runner.tasks):
            now = [v for v, tasks in active.items() if task.name in tasks]
            if not now or runner.out_of_time():
                continue
            for name in [base] + [v for v in now if v != base]:
                self._timed(runner, variants, name, task.name, {name: {task.name}})
            if len(variants) > 1:
                failed = self.failed(runner)
                active = {v: tasks for v, tasks in active.items() if v not in failed}
                for v in failed & set(now):
                    self.stopped.setdefault(v, {})[task.name] = "variant FAILed"

    def _timed(self, runner: RoundsRunner, variants: Sequence[VariantRef], name: str, task: str,
               active: dict[str, set[str]]) -> None:
        """``runner.round`` for one variant on one task, adding its seconds and new pairs to ``costs``."""
        before, t0 = len(runner.store.done_ids(name, task)), time.monotonic()
        runner.round(variants, active, task_major=True)
        pairs = len(runner.store.done_ids(name, task)) - before
        if pairs > 0:
            self.costs.add(name, task, time.monotonic() - t0, pairs)

    def budget_left(self) -> float | None:
        """Seconds of the budget left (None: no budget)."""
        return self.started + self.budget_s - time.monotonic() if self.budget_s is not None else None

    def failed(self, runner: RoundsRunner) -> set[str]:
        """Variants the gate FAILs on what is stored so far."""
        return self.decision(runner).failed

    def decision(self, runner: RoundsRunner) -> Decision:
        """``decide`` on what is stored so far."""
        if self.decide is None:
            raise ValueError("Rounds with variants needs a decision function (evalsuite.gate.decide.store_decider)")
        return self.decide(runner.store)

    def _still_open(self, runner: RoundsRunner, variants: Sequence[VariantRef]) -> dict[str, dict[str, int]]:
        """variant -> {task: pairs its quickest open check needs}, for the tasks that can still be decided."""
        if len(variants) < 2:
            return {}
        decision = self.decision(runner)
        self.failing = {v: dict(t) for v, t in decision.failing.items()}
        drawn = {t.name: len(t.samples) for t in runner.tasks}
        needs = decision.open
        for v in (v.name for v in variants[1:]):
            for t in drawn:
                if t not in needs.get(v, {}) and t not in self.stopped.get(v, {}):
                    self.stopped.setdefault(v, {})[t] = f"decided ({decision.verdicts.get(v, '?')})"
        sharing = {t: sum(t in n for n in needs.values()) for t in drawn}
        out: dict[str, dict[str, int]] = {}
        for v, per_task in needs.items():
            fit = {t: need for t, need in per_task.items()
                   if self.fits(v, t, need, drawn.get(t, 0), sharing[t], variants[0].name)}
            if fit:
                out[v] = fit
        return out

    def fits(self, variant: str, task: str, need: int, drawn: int, sharing: int, base: str) -> bool:
        """Whether ``need`` more pairs fit in the cap and the budget left; else recorded, said once, and False."""
        room = self.caps.get(task, DEFAULT_CAP) - drawn
        seconds = self.costs.need_seconds(variant, task, need, sharing, base, drawn)
        left = self.budget_left()
        if need <= room and (left is None or seconds <= left):
            self.out_of_reach.get(variant, {}).pop(task, None)
            self.stopped.get(variant, {}).pop(task, None)
            return True
        why = (f"~{need} more pairs, more than the cap of {self.caps.get(task)} leaves ({drawn} drawn)"
               if need > room else f"~{need} more pairs take ~{seconds:.0f} s, more than the {max(left, 0):.0f} s "
                                   "of budget left")
        if self.out_of_reach.setdefault(variant, {}).get(task) is None:
            self.log(f"{variant} · {task}: {why}: no more samples for it")
        self.out_of_reach[variant][task] = need
        self.stopped.setdefault(variant, {})[task] = "out of reach: " + why
        return False

    def draw(self, runner: RoundsRunner, needs: dict[str, dict[str, int]], base: str) -> bool:
        """Draw the next samples of every task an open variant needs, in the runner's (quickest-first) order;
        False when none of them can grow. With a budget, a draw is cut to what the budget left affords at the
        measured seconds per sample (the baseline's and every variant's that joins it), after the draws before
        it: whole batches where they fit, never fewer than the first variant's need (which ``fits`` checked).
        When the budget cannot give every variant its need, ``joining`` picks who runs the draw; the others sit
        this round out on that task (removed from ``needs``, the round's ``active``) and run the samples later."""
        grew, left = False, self.budget_left()
        for task in runner.tasks:
            wants = {v: need[task.name] for v, need in needs.items() if task.name in need}
            if not wants or task.name in self.capped:
                continue
            room = self.caps.get(task.name, DEFAULT_CAP) - len(task.samples)
            k = draw_size(max(wants.values()), self.steps.get(task.name, self.round_size), self.batch_size, room)
            if room <= 0:
                self.capped[task.name] = f"cap {self.caps.get(task.name)}"
                continue
            if left is not None:
                drawn = len(task.samples)
                order = self.priority(task.name, wants, base, drawn)
                seconds = {v: self.costs.per_pair(v, task.name) for v in order}
                base_s = self.costs.base_seconds(task.name, k, drawn, base) / max(k, 1)  # per sample, over the draw
                chosen, afford = joining(order, wants, seconds, base_s, left, k)
                if grew and afford < wants[chosen[0]]:
                    continue  # the draws before it took what is left; next round, if any
                k = min(k, max(afford, wants[chosen[0]], 1))
                left -= self.costs.base_seconds(task.name, k, drawn, base) + k * sum(seconds[v] for v in chosen)
                self._defer(needs, task.name, [v for v in order if v not in chosen], chosen[0])
            if task.draw(k) == 0:
                self.capped[task.name] = f"its {len(task.samples)} samples are all used"
                continue
            self.steps[task.name], grew = k, True
        return grew

    def priority(self, task: str, wants: dict[str, int], base: str, drawn: int) -> list[str]:
        """The variants wanting ``task``, nearest decision first: a check heading to a FAIL before the rest, then
        by the seconds their need takes (``RunCosts.need_seconds``)."""
        def key(v: str) -> tuple[int, float, str]:
            fail = self.failing.get(v, {}).get(task)
            need = fail if fail is not None else wants[v]
            return (0 if fail is not None else 1, self.costs.need_seconds(v, task, need, len(wants), base, drawn), v)

        return sorted(wants, key=key)

    def _defer(self, needs: dict[str, dict[str, int]], task: str, later: list[str], first: str) -> None:
        """``later`` sit this round out on ``task`` (said once each): the budget left went to ``first``."""
        for v in later:
            needs[v].pop(task, None)
            note = f"budget left went to {first}'s nearer decision"
            if self.stopped.get(v, {}).get(task) != note:
                self.log(f"{v} · {task}: {note}: it waits")
            self.stopped.setdefault(v, {})[task] = note

    def _import_baseline(self, runner: RoundsRunner, base: str, tasks: set[str]) -> None:
        """Take the new samples' baseline answers from a stored baseline, where it has them (no regeneration)."""
        source = runner.baseline_source
        if source is None:
            return
        for task in runner.tasks:
            if task.name in tasks:
                source.import_into(runner.store, task, base, runner.backend.settings(), quiet=True)

    def _mark(self, active: dict[str, Any], why: str) -> None:
        for v, tasks in active.items():
            for t in tasks:
                self.stopped.setdefault(v, {}).setdefault(t, why)

    def _store(self, runner: RoundsRunner, n_round: int) -> None:
        runner.store.update_state(rounds=n_round, drawn={t.name: len(t.samples) for t in runner.tasks},
                                  stop_reason=self.stop_reason, capped=self.capped,
                                  out_of_reach={v: t for v, t in self.out_of_reach.items() if t},
                                  stopped=self.stopped, **self.costs.to_state())
