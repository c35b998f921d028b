"""The planners: what a run draws next, from what the gate decided and what is stored (``next(decision, book)``),
never calling the runner; ``run.pipeline.drive`` owns the one loop (``while chunk := planner.next(...):
runner.look(chunk)``). A fixed run (``Fixed``) is one draw of everything. A sequential run (``Rounds``) goes look
after look, each drawn where a decision is cheapest, re-gated after every chunk; the wall-clock budget of the whole
command, not a sample count, ends it.

Each look asks the gate (the injected ``decide``: the CLI passes ``evalsuite.gate.decide.store_decider``, the run
gated as ``evalsuite gate`` would gate it) what is open, prices every open check's need in seconds
(``run.schedule``: the variant's measured seconds per pair plus its share of the baseline's) and draws the task
whose decision is cheapest: first a check heading to a FAIL that is in reach of the budget, then first looks
(``round_size`` pairs of a task), then the rest towards a PASS, geometrically growing (``draws.GROWTH``) in whole
decode batches. Other variants wanting the same task join the draw while the budget covers them. A want that
costs more than the budget left, or more pairs than the cap (``max_samples``; default each stream's size, or
``DEFAULT_CAP``), is out of reach: it is said once and recorded (``out_of_reach``, ``stopped``).

A look runs in chunks (``run.schedule.Chunk``) of one decode batch (a task's first chunk, while its cost is unmeasured, ``PROBE``
samples): the baseline answers a chunk only when the chunk's predicted seconds fit in what is left, and every
variant of the draw then pairs it, so the baseline answers nothing no variant draws; none of them starts a batch
past the budget's end (a chunk priced low can still run long: what a variant did not pair, a later run pairs,
the baseline's answers being stored). The budget counts from
``started`` (the CLI passes the process's start: loading and building count) and holds back ``END_SHARE`` of it
(at most ``END_MAX_S``) for what follows the draws: the speed probes, the gate and the report.

Why this keeps its error rates: the gate decides on anytime-valid confidence sequences (evalsuite.stats, docs/
gate.md), valid at every n simultaneously and under any stopping rule; the choice of task depends on what was
seen, but within a task samples come in the stream's fixed order, never selected on outcomes, so each pair's bet
is fair under the null whichever task it came from (docs/gate.md, "Sequential runs"). A re-gate of the stored run
sees exactly the pairs the run stopped with. ``--resume`` continues from ``drawn``. A look that draws new samples
starts with a chunk that only draws them (``upto`` 0), so that its first paired chunk is sized on what the stream
gave.
The meta says why each (variant, task) stopped (``stopped``) and what a pair cost (``seconds_per_pair``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from evalsuite.core.decision import Decision
from evalsuite.run.schedule import (RANK_WORDS, Book, Chunk, Draw, Want, choose, everything, order, price, reach,
                                    wants)

PROBE = 4  #: samples in a task's first chunk while its cost is unmeasured (a first needle chunk is dear)
END_SHARE = 0.05  #: share of the budget held back for the speed probes, the gate and the report
END_MAX_S = 60.0  #: at most this many seconds of it


@dataclass
class Fixed:
    """A fixed run's plan: one draw of everything (``run.schedule.everything``); its variants are built one at a
    time, so none is built before its pass."""

    builds = False  #: whether the runner builds every variant before the first draw (``Runner.start``)
    drawn: bool = False

    def next(self, decision: Decision | None, book: Book) -> Chunk | None:
        """Everything, once; then None."""
        if self.drawn:
            return None
        self.drawn = True
        return everything(book.tasks, [v for v in book.variants if v != book.base])

    def end(self) -> float | None:
        return None

    def record(self, drawn: dict[str, int], costs: Any) -> dict[str, Any]:
        """Nothing: a fixed run's meta records no looks."""
        return {}


@dataclass
class Look:
    """The look in progress: its draw, the variants still pairing it (``joined``), the task's samples drawn before
    it, and the pairs held when its first chunk was planned (None: not yet)."""

    draw: Draw
    joined: tuple[str, ...]
    before: int
    held: int | None = None


@dataclass
class Rounds:
    """How a sequential run draws samples: ``next`` plans chunk after chunk, look after look. Its fields below
    ``clock`` are its own record of the run, set by ``next`` alone and stored in the run's meta (``record``)."""

    caps: dict[str, int] = field(default_factory=dict)  # task -> its cap (``run.draws.task_cap``)
    round_size: int = 16  # a task's first look
    budget_s: float | None = None  # the whole command's wall clock, from ``started``
    log: Callable[[str], None] = print
    batch_size: int = 1  # a look runs in chunks of one decode batch
    started: float = field(default_factory=time.monotonic)  # the CLI passes the process's start
    reserve_s: float | None = None  # held back for what follows the draws (speed probes, report); None: END_SHARE
    looks: int = 0  # looks so far (a resumed run: its meta's ``rounds``)
    clock: Callable[[], float] = lambda: time.monotonic()  # read at each call; the simulation passes simulated time
    stop_reason: str = ""
    capped: dict[str, str] = field(default_factory=dict)  # task -> why it could not draw more
    out_of_reach: dict[str, dict[str, int]] = field(default_factory=dict)  # variant -> task -> pairs still needed
    stopped: dict[str, dict[str, str]] = field(default_factory=dict)  # variant -> task -> why it stopped drawing
    steps: dict[str, int] = field(default_factory=dict)  # task -> its last draw
    said: set[tuple[str, str, int]] = field(default_factory=set)  # (variant, task, rank) said out of reach
    spent: bool = False  # a chunk did not fit in the budget left: the budget is as good as spent
    look: Look | None = None

    builds = True  #: every variant stays built across the looks: built before the first is timed

    def next(self, decision: Decision | None, book: Book) -> Chunk | None:
        """The next chunk: of the look in progress while it goes on, else of the next look; None when the run is
        decided, capped or out of budget (``stop_reason``). ``decision``: the gate on what is stored now (None:
        the baseline alone); ``book``: what is stored (its caps and draw sizes are this plan's)."""
        book = replace(book, caps=self.caps, first_look=self.round_size, batch=self.batch_size)
        if self.look is not None:
            chunk = self._chunk(decision, book)
            if chunk is not None:
                return chunk
            look, self.look = self.look, None
            task = look.draw.task
            if look.held == _held(book, task) and not self.out_of_time():
                return self._stop("no new pairs on " + task + ": " + (self.capped.get(task) or "nothing ran"))
        if self.out_of_time():
            return self._budget_spent(book)
        if decision is None and _open(book):
            raise ValueError("Rounds with variants needs a decision (evalsuite.gate.decide.store_decider)")
        found = price(book, wants(book, decision))
        self._note_decided(decision, book)
        ranked = order([w for w in found if self._reachable(book, w)], book.tasks)
        if not ranked:
            return self._stop(self._why_done(found))
        draw = choose(book, ranked, self.budget_left(), self.steps.get(ranked[0].task, 0))
        assert draw is not None
        self.looks += 1
        before = book.drawn.get(draw.task, 0)
        self.look = Look(draw, tuple(v for v in _open(book) if v in draw.variants), before)
        if draw.target > before:  # new samples: drawn first, the chunks sized on what the stream gave
            return Chunk((draw.task,), upto=0, target=draw.target)
        return self.next(decision, book)

    def _chunk(self, decision: Decision | None, book: Book) -> Chunk | None:
        """The look's next chunk of one decode batch (a task's first, while its cost is unmeasured, ``PROBE``
        samples), cut to what the budget left affords; None when the look is over: drawn to its target, no variant
        left pairing it (each FAILed or decided on the task; re-decided between chunks), or out of budget."""
        look, task = self.look, self.look.draw.task
        assert look is not None
        drawn, alone = book.drawn.get(task, 0), not _open(book)
        if look.held is None:
            self._started(look, book)
        elif self.out_of_time():
            return None
        elif not alone:
            look.joined = tuple(v for v in look.joined if v not in decision.failed
                                and task in decision.open.get(v, {}))
        if not look.joined and not alone:
            return None
        names, hi = [book.base, *look.joined], min(look.draw.target, drawn)
        have = {n: book.have.get(n, {}).get(task, 0) for n in names}
        lo = min(have.values())
        if lo >= hi:
            return None
        known = all(book.costs.per_pair(n, task) > 0 or have[n] >= hi for n in names)
        upto = self._fit(book, names, task, lo, min(hi, lo + (book.batch if known else min(PROBE, book.batch))))
        if upto <= lo:
            self.spent = True
            return None
        return Chunk((task,), look.joined, upto=upto, deadline=self.end())

    def _started(self, look: Look, book: Book) -> None:
        """A look's first chunk: what its draw gave is known (none: the stream is used up), and it is said."""
        task, drawn = look.draw.task, book.drawn.get(look.draw.task, 0)
        if look.draw.target > look.before:
            added = drawn - look.before
            if added == 0:
                self.capped[task] = f"its {drawn} samples are all used"
            self.steps[task] = added or self.steps.get(task, 0)
        look.held = _held(book, task)
        self.log(f"look {self.looks}: {task} to {min(look.draw.target, drawn)} for "
                 f"{', '.join(look.draw.variants)} ({look.draw.why})")

    def end(self) -> float | None:
        """When no new look or chunk may start: the budget's end less what the end of the command needs."""
        if self.budget_s is None:
            return None
        reserve = self.reserve_s if self.reserve_s is not None else min(END_MAX_S, END_SHARE * self.budget_s)
        return self.started + self.budget_s - reserve

    def budget_left(self) -> float | None:
        """Seconds left before ``end`` (None: no budget)."""
        end = self.end()
        return None if end is None else end - self.clock()

    def out_of_time(self) -> bool:
        end = self.end()
        return self.spent or (end is not None and self.clock() > end)

    def _fit(self, book: Book, names: list[str], task: str, lo: int, upto: int) -> int:
        """``upto`` cut to what the budget left affords at the measured seconds per pair (unmeasured: free)."""
        left = self.budget_left()
        if left is None:
            return upto
        costs = book.costs
        per_sample = sum(costs.expected(n, task) for n in names[1:])
        if book.have.get(names[0], {}).get(task, 0) < upto and upto > costs.held(task):
            per_sample += costs.base_rate(task, names[0]) or costs.expected(names[0], task)
        if per_sample <= 0:
            return upto if left > 0 else lo
        return min(upto, lo + int(left // per_sample))

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

    def _budget_spent(self, book: Book) -> None:
        """The budget ended the run: what was still open stopped for that."""
        for v in _open(book):
            for t in self.caps:
                self.stopped.setdefault(v, {}).setdefault(t, "budget spent")
        return self._stop(f"budget of {self.budget_s:g} s spent")

    def _stop(self, why: str) -> None:
        """The run is over, for ``why``: said, and None (no more chunks)."""
        self.stop_reason = why
        self.log(f"sequential run: {self.looks} look(s); stopped: {self.stop_reason}")
        return None

    def record(self, drawn: dict[str, int], costs: Any) -> dict[str, Any]:
        """The run's meta fields this plan keeps: looks, samples drawn per task, why it stopped, what was capped,
        out of reach or stopped, and the costs (``core.costs.RunCosts.to_state``)."""
        return {"rounds": self.looks, "drawn": drawn, "stop_reason": self.stop_reason, "capped": self.capped,
                "out_of_reach": {v: t for v, t in self.out_of_reach.items() if t}, "stopped": self.stopped,
                **costs.to_state()}


def _open(book: Book) -> list[str]:
    """The variants of ``book`` (not the baseline: a baseline alone has none)."""
    return [v for v in book.variants if v != book.base]


def _held(book: Book, task: str) -> int:
    """Pairs of ``task`` held by the baseline and every variant together."""
    return sum(book.have.get(n, {}).get(task, 0) for n in {book.base, *book.variants})
