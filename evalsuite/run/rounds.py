"""Sequential rounds: draw samples in rounds, re-gate after each, keep sampling only where undecided.

Round 1 runs the first ``round_size`` samples of every task's stream (stratified over the task's slices, the same
samples for every variant). After each round the run is gated as ``evalsuite gate`` would gate it; a (variant,
task) whose checks are all decided (PASS or FAIL) stops asking for samples, a variant that FAILs stops entirely,
and the next round draws ``GROWTH x round_size`` more samples only for tasks some variant still needs (the
baseline answers them; decided variants skip them). Round 1 is small so a broken variant FAILs after a few samples;
the survivors typically need many more pairs (a no-op about 77 per task at max_drop 0.05), and larger rounds give
the decoder larger batches. A (variant, task) none of whose open checks can decide, by their own estimates
(``more_needed``, from the observed discordance), within what ``max_samples`` leaves stops drawing too: it cannot
be decided in this run, and its samples would only spend the budget the decidable ones need (it stays INCONCLUSIVE with its
estimate; ``out_of_reach`` in the run's meta). The run ends when nothing is undecided, when every undecided task
hit ``max_samples`` (or its finite stream ended), or when the wall-clock budget is spent: no new (variant, task)
starts and a generation in progress stops after its current batch, so a round can end partway (rounds go task by
task through every variant, so the budget cuts all variants alike). Each round takes the tasks cheapest first, by
the seconds per sample measured so far (the first round in the configured order, which by default is cheapest
first), and the run is re-gated after every task, so a budget cuts the expensive tasks and a failing variant is
stopped on a cheap one, without running the rest of the round.

Why this keeps its error rates: the gate decides on anytime-valid confidence sequences (evalsuite.stats.sequential,
docs/gate.md), valid at every n simultaneously, so looking after every round and stopping on a decision does not
inflate them; and a re-gate of the stored run sees exactly the pairs the run stopped with, so it gives the same
verdicts. Which (variant, task) keeps sampling may depend on the data seen so far (a decision, an estimate out of
reach): a confidence sequence covers the truth at every n at once, so any such data-dependent stopping keeps its
coverage. What was drawn per task is stored (``drawn``) so ``--resume`` continues from there.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from evalsuite.run.backend import VariantRef

#: rounds after the first draw this many times ``round_size`` (cumulative 16, 48, 80, ... at round_size 16)
GROWTH = 2


@dataclass
class Rounds:
    """How a sequential run draws samples; ``drive`` runs it on a Runner."""

    max_samples: int
    round_size: int = 16
    budget_s: float | None = None
    policy: Path | None = None  # the policy the run is gated with (default: the shipped one)
    log: Callable[[str], None] = print
    started: float = field(default_factory=time.monotonic)
    stop_reason: str = ""
    capped: dict[str, str] = field(default_factory=dict)  # task -> why it could not draw more
    out_of_reach: dict[str, dict[str, int]] = field(default_factory=dict)  # variant -> task -> pairs still needed

    def drive(self, runner: Any, variants: Sequence[VariantRef]) -> None:
        """Rounds until decided, capped or out of budget; the final state is stored in the run's meta."""
        tasks = {t.name for t in runner.tasks}
        active = {v.name: set(tasks) for v in variants[1:]} or {variants[0].name: set(tasks)}
        n_round = int(runner.store.meta().get("rounds", 0))
        if self.budget_s is not None:
            runner.deadline = self.started + self.budget_s
        while True:
            n_round += 1
            self.cheapest_first(runner)
            self.one_round(runner, variants, active)
            self._store(runner, n_round)
            if runner.out_of_time():
                self.stop_reason = f"budget of {self.budget_s:g} s spent"
                break
            active = self._still_open(runner, variants)
            if not active:
                reach = any(self.out_of_reach.values())
                self.stop_reason = "every check decided" + (" or out of reach of --max-samples" if reach else "")
                break
            if not self._draw(runner, set().union(*active.values())):
                self.stop_reason = "sample cap reached: " + ", ".join(f"{t} ({why})" for t, why in
                                                                      sorted(self.capped.items()))
                break
        self._store(runner, n_round)
        self.log(f"sequential run: {n_round} round(s); stopped: {self.stop_reason}")

    @staticmethod
    def cheapest_first(runner: Any) -> None:
        """Order the tasks by their measured cost per sample (tasks not measured yet keep their place, first),
        so a budget cuts the expensive tasks and a failing variant is found on a cheap one."""
        order = {t.name: i for i, t in enumerate(runner.tasks)}
        runner.tasks.sort(key=lambda t: (runner.cost_per_sample(t.name) or 0.0, order[t.name]))

    def one_round(self, runner: Any, variants: Sequence[VariantRef], active: dict[str, set[str]]) -> None:
        """A round task by task (every variant on a task, then the next task); a variant the gate FAILs after a
        task skips the rest of the round (a FAIL on the anytime-valid sequences stands, so nothing more is
        needed from it)."""
        for task in list(runner.tasks):
            now = {v: {task.name} for v, tasks in active.items() if task.name in tasks}
            if not now or runner.out_of_time():
                continue
            runner.round(variants, now, task_major=True)
            if len(variants) > 1:
                failed = self.failed(runner)
                active = {v: tasks for v, tasks in active.items() if v not in failed}

    def failed(self, runner: Any) -> set[str]:
        """Variants the gate FAILs on what is stored so far."""
        from evalsuite.gate.store_gate import gate_store

        verdicts = gate_store(runner.store, self.policy).gate.variant_verdicts
        return {v for v, verdict in verdicts.items() if verdict == "FAIL"}

    def _still_open(self, runner: Any, variants: Sequence[VariantRef]) -> dict[str, set[str]]:
        """variant -> tasks the gate has not decided (and could decide with more samples)."""
        from evalsuite.gate.store_gate import gate_store
        from evalsuite.gate.verdict import undecided

        if len(variants) < 2:
            return {}
        gate = gate_store(runner.store, self.policy).gate
        drawn = {t.name: len(t.samples) for t in runner.tasks}
        open_ = {}
        for v, tasks in undecided(gate).items():
            reach = {t for t in tasks if self._reachable(v, t, pairs_to_decide(gate, v, t), drawn.get(t, 0))}
            if reach:
                open_[v] = reach
        return open_

    def _reachable(self, variant: str, task: str, need: int, drawn: int) -> bool:
        """Whether ``need`` more samples of ``task`` fit in what ``max_samples`` leaves; else recorded and said."""
        room = self.max_samples - drawn
        if need <= room:
            self.out_of_reach.get(variant, {}).pop(task, None)
            return True
        if self.out_of_reach.setdefault(variant, {}).get(task) is None:
            self.log(f"{variant} · {task}: ~{need} more samples to decide, more than --max-samples "
                     f"{self.max_samples} leaves ({drawn} drawn): no more samples for it")
        self.out_of_reach[variant][task] = need
        return False

    def _draw(self, runner: Any, needed: set[str]) -> bool:
        """Draw the next round for the ``needed`` tasks; False when none of them can grow."""
        grew = False
        for task in runner.tasks:
            if task.name not in needed or task.name in self.capped:
                continue
            room = self.max_samples - len(task.samples)
            if room <= 0:
                self.capped[task.name] = f"--max-samples {self.max_samples}"
                continue
            if task.draw(min(GROWTH * self.round_size, room)) == 0:
                self.capped[task.name] = f"its {len(task.samples)} samples are all used"
                continue
            grew = True
        return grew

    def _store(self, runner: Any, n_round: int) -> None:
        runner.store.set_meta({"rounds": n_round, "drawn": {t.name: len(t.samples) for t in runner.tasks},
                               "stop_reason": self.stop_reason, "capped": self.capped,
                               "out_of_reach": {v: t for v, t in self.out_of_reach.items() if t}})


def pairs_to_decide(gate: Any, variant: str, task: str) -> int:
    """Samples of ``task`` after which its quickest open check would decide (``more_needed``), a slice check's
    estimate scaled from its own pairs to the task's (a slice with a third of the samples needs three task samples
    per pair). The quickest, not the slowest: one check's FAIL decides the variant, and a PASSed check leaves the
    others to be re-estimated next round; only when no open check can decide is the task out of reach."""
    task_n = max((c.n for c in gate.checks if c.variant == variant and c.task == task), default=0)
    needs = [-(-c.more_needed * task_n // c.n) if c.n and task_n > c.n else c.more_needed for c in gate.checks
             if c.variant == variant and c.task == task and c.verdict == "INCONCLUSIVE" and c.more_needed is not None]
    return min(needs, default=0)
