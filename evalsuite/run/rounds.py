"""Sequential runs: look after look, each drawn where a decision is cheapest, re-gated after every chunk; the
wall-clock budget of the whole command, not a sample count, ends the run.

Each look asks the gate (the injected ``decide``: the CLI passes ``evalsuite.gate.decide.store_decider``, the run
gated as ``evalsuite gate`` would gate it) what is open, prices every open check's need in seconds
(``run.schedule``: the variant's measured seconds per pair plus its share of the baseline's) and draws the task
whose decision is cheapest: first a check heading to a FAIL that is in reach of the budget, then first looks
(``round_size`` pairs of a task), then the rest towards a PASS, geometrically growing (``draws.GROWTH``) in whole
decode batches. Other variants wanting the same task join the draw while the budget covers them. A want that
costs more than the budget left, or more pairs than the cap (``max_samples``; default each stream's size, or
``DEFAULT_CAP``), is out of reach: it is said once and recorded (``out_of_reach``, ``stopped``).

A look runs in chunks of one decode batch (a task's first chunk, while its cost is unmeasured, ``PROBE``
samples): the baseline answers a chunk only when the chunk's predicted seconds fit in what is left, and every
variant of the draw then pairs it, so the baseline answers nothing no variant draws. The budget counts from
``started`` (the CLI passes the process's start: loading and building count) and holds back ``END_SHARE`` of it
(at most ``END_MAX_S``) for what follows the draws: the speed probes, the gate and the report.

Why this keeps its error rates: the gate decides on anytime-valid confidence sequences (evalsuite.stats, docs/
gate.md), valid at every n simultaneously and under any stopping rule; the choice of task depends on what was
seen, but within a task samples come in the stream's fixed order, never selected on outcomes, so each pair's bet
is fair under the null whichever task it came from (docs/gate.md, "Sequential runs"). A re-gate of the stored run
sees exactly the pairs the run stopped with. ``--resume`` continues from ``drawn``.
The meta says why each (variant, task) stopped (``stopped``) and what a pair cost (``seconds_per_pair``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol, Sequence

from evalsuite.core.costs import RunCosts
from evalsuite.core.decision import Decide, Decision
from evalsuite.core.store import Store
from evalsuite.run.backend import Backend, VariantRef
from evalsuite.run.draws import task_cap
from evalsuite.run.prepare import PreparedTask
from evalsuite.run.schedule import RANK_WORDS, Book, Draw, Want, choose, order, price, reach, wants

PROBE = 4  #: samples in a task's first chunk while its cost is unmeasured (a first needle chunk is dear)
END_SHARE = 0.05  #: share of the budget held back for the speed probes, the gate and the report
END_MAX_S = 60.0  #: at most this many seconds of it


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
    def set_deadline(self, deadline: float | None) -> None: ...
    def set_limits(self, limits: dict[str, int]) -> None: ...


@dataclass
class Rounds:
    """How a sequential run draws samples; ``drive`` runs it on a Runner."""

    max_samples: int | None = None  # safety cap per task (None: each stream's size, or DEFAULT_CAP)
    round_size: int = 16  # a task's first look
    budget_s: float | None = None  # the whole command's wall clock, from ``started``
    decide: Decide | None = None  # what is still open (evalsuite.gate.decide); needed with more than a baseline
    log: Callable[[str], None] = print
    batch_size: int = 1  # a look runs in chunks of one decode batch
    started: float = field(default_factory=time.monotonic)  # the CLI passes the process's start
    reserve_s: float | None = None  # held back for what follows the draws (speed probes, report); None: END_SHARE
    stop_reason: str = ""
    capped: dict[str, str] = field(default_factory=dict)  # task -> why it could not draw more
    out_of_reach: dict[str, dict[str, int]] = field(default_factory=dict)  # variant -> task -> pairs still needed
    stopped: dict[str, dict[str, str]] = field(default_factory=dict)  # variant -> task -> why it stopped drawing
    costs: RunCosts = field(default_factory=RunCosts)  # measured seconds per pair, what a stored baseline holds
    caps: dict[str, int] = field(default_factory=dict)  # task -> its cap
    steps: dict[str, int] = field(default_factory=dict)  # task -> its last draw
    looks: int = 0
    said: set[tuple[str, str, int]] = field(default_factory=set)  # (variant, task, rank) said out of reach
    spent: bool = False  # a chunk did not fit in the budget left: the budget is as good as spent

    def drive(self, runner: RoundsRunner, variants: Sequence[VariantRef]) -> None:
        """Looks until decided, capped or out of budget; the final state is stored in the run's meta."""
        state, source = runner.store.state(), runner.baseline_source
        self.looks = int(state.rounds)
        self.caps = {t.name: task_cap(t, self.max_samples) for t in runner.tasks}
        held = ({t.name: source.held(t, runner.backend.settings()) for t in runner.tasks}
                if source is not None else {})
        self.costs = replace(RunCosts.from_state(state), stored=held)  # what the store holds now, not at the last run
        runner.set_deadline(self.end())
        self.build(runner, variants[1:])
        while True:
            if self.out_of_time(runner):
                self._budget_spent(variants)
                break
            decision = self.decision(runner) if len(variants) > 1 else None
            book = self.book(runner, variants)
            found = price(book, wants(book, decision))
            self._note_decided(decision, book)
            ranked = order([w for w in found if self._reachable(book, w)], book.tasks)
            if not ranked:
                self.stop_reason = self._why_done(found)
                break
            draw = choose(book, ranked, self.budget_left(), self.steps.get(ranked[0].task, 0))
            self.looks += 1
            ran = self.look(runner, variants, draw)
            self._store(runner)
            if not ran and not self.out_of_time(runner):
                self.stop_reason = f"no new pairs on {draw.task}: " + (self.capped.get(draw.task) or "nothing ran")
                break
        self._store(runner)
        self.log(f"sequential run: {self.looks} look(s); stopped: {self.stop_reason}")

    def end(self) -> float | None:
        """When no new look or chunk may start: the budget's end less what the end of the command needs."""
        if self.budget_s is None:
            return None
        reserve = self.reserve_s if self.reserve_s is not None else min(END_MAX_S, END_SHARE * self.budget_s)
        return self.started + self.budget_s - reserve

    def budget_left(self) -> float | None:
        """Seconds left before ``end`` (None: no budget)."""
        end = self.end()
        return None if end is None else end - time.monotonic()

    def out_of_time(self, runner: RoundsRunner) -> bool:
        return self.spent or runner.out_of_time()

    @staticmethod
    def build(runner: RoundsRunner, variants: Sequence[VariantRef]) -> None:
        """Build ``variants`` before any task is timed (``copies_baseline`` builds a variant to compare it with the
        baseline), so a variant's one-off build (quantizing its weights: ~1 s for w4g64 on 2 cores, quiet) is not
        counted in the seconds per pair of its first task, which would make that task look many times dearer to
        the budget's estimates than it is."""
        for variant in variants:
            runner.copies_baseline(variant)

    def book(self, runner: RoundsRunner, variants: Sequence[VariantRef]) -> Book:
        """What the scheduler sees now (``run.schedule.Book``)."""
        names = [v.name for v in variants]
        samples = {t.name: {s.id for s in t.samples} for t in runner.tasks}
        have = {v: {t: len(runner.store.done_ids(v, t) & ids) for t, ids in samples.items()} for v in names}
        return Book(names[1:] or names[:1], [t.name for t in runner.tasks], have,
                    {t: len(ids) for t, ids in samples.items()}, self.caps, self.costs, names[0],
                    self.round_size, self.batch_size)

    def look(self, runner: RoundsRunner, variants: Sequence[VariantRef], draw: Draw) -> bool:
        """One look: ``draw.task`` drawn up to its target (new samples in stream order), then paired chunk by chunk
        of one decode batch: the baseline answers a chunk only when the chunk's predicted seconds fit in the
        budget left, and every variant of the draw then pairs it (the baseline answers nothing no variant
        draws); re-decided between chunks. True when a pair was stored."""
        task = next(t for t in runner.tasks if t.name == draw.task)
        if draw.target > len(task.samples):
            added = task.draw(draw.target - len(task.samples))
            if added == 0:
                self.capped[task.name] = f"its {len(task.samples)} samples are all used"
            self.steps[task.name] = added or self.steps.get(task.name, 0)
            self._import_baseline(runner, variants[0].name, task)
        self.log(f"look {self.looks}: {draw.task} to {min(draw.target, len(task.samples))} for "
                 f"{', '.join(draw.variants)} ({draw.why})")
        joined = [v for v in variants[1:] if v.name in draw.variants]
        stored = len(runner.store.samples())
        hi = min(draw.target, len(task.samples))
        try:
            self._chunks(runner, variants, joined, task, hi)
        finally:
            runner.set_limits({})
        return len(runner.store.samples()) > stored

    def _chunks(self, runner: RoundsRunner, variants: Sequence[VariantRef], joined: list[VariantRef],
                task: PreparedTask, hi: int) -> None:
        base = variants[0]
        while joined or len(variants) == 1:
            have = self.book(runner, variants).have
            names = [base.name] + [v.name for v in joined]
            lo = min(have[n][task.name] for n in names)
            if lo >= hi:
                return
            known = all(self.costs.per_pair(n, task.name) > 0 or have[n][task.name] >= hi for n in names)
            upto = min(hi, lo + (self.batch_size if known else min(PROBE, self.batch_size)))
            upto = self._fit(names, task.name, have, lo, upto)
            if upto <= lo:
                self.spent = True
                return
            runner.set_limits({task.name: upto})
            self._timed(runner, variants, base.name, task.name)
            deadline = self.end()
            runner.set_deadline(None)  # the chunk the baseline answered is paired by every variant of the draw
            try:
                for v in joined:
                    self._timed(runner, variants, v.name, task.name)
            finally:
                runner.set_deadline(deadline)
            if self.out_of_time(runner):
                return
            if len(variants) == 1:  # the baseline alone (a baseline build): the whole look, chunk after chunk
                continue
            decision = self.decision(runner)
            joined = [v for v in joined if v.name not in decision.failed and task.name in decision.open.get(v.name, {})]

    def _fit(self, names: list[str], task: str, have: dict[str, dict[str, int]], lo: int, upto: int) -> int:
        """``upto`` cut to what the budget left affords at the measured seconds per pair (unmeasured: free)."""
        left = self.budget_left()
        if left is None:
            return upto
        per_sample = sum(self.costs.expected(n, task) for n in names[1:])
        if have[names[0]][task] < upto and upto > self.costs.held(task):
            per_sample += self.costs.base_rate(task, names[0]) or self.costs.expected(names[0], task)
        if per_sample <= 0:
            return upto if left > 0 else lo
        return min(upto, lo + int(left // per_sample))

    def _timed(self, runner: RoundsRunner, variants: Sequence[VariantRef], name: str, task: str) -> None:
        """``runner.round`` for one variant on one task, adding its seconds and new pairs to ``costs``."""
        before, t0 = len(runner.store.done_ids(name, task)), time.monotonic()
        runner.round(variants, {name: {task}}, task_major=True)
        pairs = len(runner.store.done_ids(name, task)) - before
        if pairs > 0:
            self.costs.add(name, task, time.monotonic() - t0, pairs)

    def decision(self, runner: RoundsRunner) -> Decision:
        """``decide`` on what is stored so far."""
        if self.decide is None:
            raise ValueError("Rounds with variants needs a decision function (evalsuite.gate.decide.store_decider)")
        return self.decide(runner.store)

    def _reachable(self, book: Book, w: Want) -> bool:
        """Whether ``w`` is in reach; else recorded, said once, and False."""
        why = reach(book, w, self.budget_left())
        if not why:
            self.out_of_reach.get(w.variant, {}).pop(w.task, None)
            return True
        full = why.endswith("is reached")
        if full:
            self.capped[w.task] = f"cap {self.caps.get(w.task)}"
        if (w.variant, w.task, w.rank) not in self.said:  # once per want, though another rank of it may be drawn
            self.said.add((w.variant, w.task, w.rank))
            self.log(f"{w.variant} · {w.task} ({RANK_WORDS[w.rank]}): {why}: not drawn for it")
        self.out_of_reach.setdefault(w.variant, {})[w.task] = w.pairs
        self.stopped.setdefault(w.variant, {})[w.task] = "cap reached" if full else "out of reach: " + why
        return False

    def _note_decided(self, decision: Decision | None, book: Book) -> None:
        """Record why a variant stopped drawing a task: it FAILed, or the task's checks are decided."""
        if decision is None:
            return
        for v in book.variants:
            verdict = decision.verdicts.get(v, "?")
            for t in book.tasks:
                if verdict in ("FAIL", "PASS"):
                    self.stopped.setdefault(v, {}).setdefault(t, "variant FAILed" if verdict == "FAIL"
                                                              else "decided (PASS)")
                elif t not in decision.open.get(v, {}) and book.have[v][t] > 0:
                    self.stopped.setdefault(v, {})[t] = f"decided ({verdict})"

    def _why_done(self, found: Sequence[Want]) -> str:
        if not found:
            return "every check decided" + (" or out of reach" if any(self.out_of_reach.values()) else "")
        if self.capped and all(self.stopped.get(w.variant, {}).get(w.task) == "cap reached" for w in found):
            return "sample cap reached: " + ", ".join(f"{t} ({why})" for t, why in sorted(self.capped.items()))
        return "every check decided or out of reach"

    def _budget_spent(self, variants: Sequence[VariantRef]) -> None:
        """The budget ended the run: what was still open stopped for that."""
        self.stop_reason = f"budget of {self.budget_s:g} s spent"
        for v in variants[1:]:
            for t in self.caps:
                self.stopped.setdefault(v.name, {}).setdefault(t, "budget spent")

    def _import_baseline(self, runner: RoundsRunner, base: str, task: PreparedTask) -> None:
        """Take the new samples' baseline answers from a stored baseline, where it has them (no regeneration)."""
        source = runner.baseline_source
        if source is not None:
            source.import_into(runner.store, task, base, runner.backend.settings(), quiet=True)

    def _store(self, runner: RoundsRunner) -> None:
        runner.store.update_state(rounds=self.looks, drawn={t.name: len(t.samples) for t in runner.tasks},
                                  stop_reason=self.stop_reason, capped=self.capped,
                                  out_of_reach={v: t for v, t in self.out_of_reach.items() if t},
                                  stopped=self.stopped, **self.costs.to_state())
