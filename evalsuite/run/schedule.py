"""Where a sequential run draws next: after every look, each open check's need is priced in seconds and the next
draw goes to the (task, variant) whose decision is cheapest. Pure functions of the gate's ``Decision``, the
measured costs (``core.costs.RunCosts``) and what is stored; ``run.rounds`` plans each draw's chunks
(``Chunk``) and ``run.runner.Runner.look`` executes them.

A want is one variant's reason to draw one task, ranked:

0. a check heading to a FAIL (``Decision.failing``; or the variant's pooled check, ``Decision.pooled``, drawn from
   one pooled task whose own drop is beyond its tolerance, at that task's own need): one such check deciding
   decides the variant;
1. a first look: fewer than ``first_look`` pairs on a task (a PASS needs every task looked at, and a first look is
   where a task that breaks shows it);
2. any other open check, towards a PASS.

Rank by rank, cheapest in seconds first (``RunCosts.need_seconds``: the variant's measured seconds per pair and its
share of the baseline's). A FAIL in reach comes before any first look, however cheap: a first look decides nothing
itself, and a FAIL it might show on a dear task costs many times a chase on a cheap one (the scheduler simulation: a
drop on the cheap task FAILed 6-20 points more often, a drop everywhere as often but sooner; docs/gate.md). A want
that costs more than the budget left, or more pairs than the cap leaves, is out of reach and dropped: a FAIL in
reach comes before a PASS out of reach. Only the choice of *task* depends on what was seen; within a task the
samples stay in the stream's fixed order (docs/gate.md, "Sequential runs", says why the anytime-valid sequences stay
valid under it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from evalsuite.core.costs import RunCosts
from evalsuite.core.decision import Decision
from evalsuite.run.draws import GROWTH, draw_size

FAILING, FIRST_LOOK, OPEN = 0, 1, 2
RANK_WORDS = {FAILING: "heading to a FAIL", FIRST_LOOK: "first look", OPEN: "open check"}


@dataclass(frozen=True)
class Want:
    """``variant`` wants ``pairs`` more pairs of ``task`` (beyond the ``have`` it holds), at ``rank``."""

    variant: str
    task: str
    rank: int
    pairs: int
    have: int
    seconds: float = 0.0

    @property
    def target(self) -> int:
        """The task samples this want needs drawn."""
        return self.have + self.pairs


@dataclass(frozen=True)
class Draw:
    """The next look: ``task`` drawn up to ``target`` samples, paired by ``variants`` (the first is the lead)."""

    task: str
    variants: tuple[str, ...]
    target: int
    why: str


@dataclass(frozen=True)
class Chunk:
    """What the runner does next (``run.runner.Runner.look``): each of ``tasks`` drawn up to ``target`` samples of
    its stream (None: as drawn), then the baseline and each of ``variants`` answer the first ``upto`` samples of
    each (None: all drawn; 0: none, a draw only); the variants pair what the baseline answered, and none of them
    starts a batch past ``deadline`` (``time.monotonic()``; None: none). ``last``: each is finished (recorded,
    released) after its pass, so one variant is built at a time."""

    tasks: tuple[str, ...]
    variants: tuple[str, ...] = ()
    upto: int | None = None
    deadline: float | None = None
    target: int | None = None
    last: bool = False


def everything(tasks: Sequence[str], variants: Sequence[str]) -> Chunk:
    """A fixed run's one draw: every task, every variant, all drawn samples, no deadline, each variant finished
    after its pass."""
    return Chunk(tuple(tasks), tuple(variants), last=True)


@dataclass(frozen=True)
class Book:
    """What the scheduler sees: the open variants, per variant and task the pairs stored, per task the samples
    drawn and its cap, the costs, the baseline's name and the draw sizes."""

    variants: Sequence[str]
    tasks: Sequence[str]
    have: Mapping[str, Mapping[str, int]]
    drawn: Mapping[str, int]
    caps: Mapping[str, int]
    costs: RunCosts
    base: str
    first_look: int = 16
    batch: int = 1


def wants(book: Book, decision: Decision | None) -> list[Want]:
    """Every (variant, task) reason to draw, one per rank that applies; a FAILed or PASSed variant has none.
    ``decision`` None: the baseline alone (first looks only)."""
    out = []
    for v in book.variants:
        verdict = decision.verdicts.get(v) if decision is not None else None
        if verdict in ("FAIL", "PASS"):
            continue
        opened = decision.open.get(v, {}) if decision is not None else {}
        for t in book.tasks:
            have = book.have.get(v, {}).get(t, 0)
            ranked = []
            fail = [n for n in ((decision.failing.get(v, {}).get(t), decision.pooled.get(v, {}).get(t))
                                if decision is not None else ()) if n]
            if fail:
                ranked.append((FAILING, min(fail)))
            if have < book.first_look and (have == 0 or t in opened):
                ranked.append((FIRST_LOOK, book.first_look - have))
            if t in opened:
                ranked.append((OPEN, opened[t] or book.first_look))  # 0: no estimate yet
            out += [Want(v, t, rank, max(1, pairs), have) for rank, pairs in ranked]  # each rank: one out of
    return out  # reach (a FAIL 5,000 pairs away) leaves the others (its PASS 32 pairs away) to be drawn


def price(book: Book, found: Sequence[Want]) -> list[Want]:
    """``found`` with their seconds: the variant's own pairs plus its share of the baseline's new samples (shared
    by the variants wanting the same task)."""
    sharing = {t: len({w.variant for w in found if w.task == t}) for t in book.tasks}
    return [Want(w.variant, w.task, w.rank, w.pairs, w.have,
                 book.costs.need_seconds(w.variant, w.task, w.pairs, sharing[w.task], book.base,
                                         book.drawn.get(w.task, 0)))
            for w in found]


def reach(book: Book, w: Want, left: float | None) -> str:
    """Why ``w`` cannot be had ("" when it can): more pairs than the cap leaves, or more seconds than are left."""
    cap = book.caps.get(w.task)
    if cap is not None and w.target > cap and w.have >= cap:
        return f"the cap of {cap} is reached"
    if cap is not None and w.target > cap and w.rank != FIRST_LOOK:
        return f"~{w.pairs} more pairs, more than the cap of {cap} leaves ({w.have} drawn)"
    if left is not None and w.seconds > left:
        return f"~{w.pairs} more pairs take ~{w.seconds:.0f} s, more than the {max(left, 0):.0f} s of budget left"
    return ""


def order(found: Sequence[Want], tasks: Sequence[str]) -> list[Want]:
    """The checks heading to a FAIL, then the first looks, then the rest, each rank cheapest in seconds first; ties
    by the task's place in ``--tasks``."""
    return sorted(found, key=lambda w: (w.rank, w.seconds, tasks.index(w.task), w.variant))


def choose(book: Book, ranked: Sequence[Want], left: float | None, last: int = 0) -> Draw | None:
    """The next draw from ``ranked`` wants in reach (``order``-ed): the first one's task, up to its target (a draw
    towards a PASS grows geometrically from the task's ``last`` draw, in whole decode batches), joined by every
    other variant wanting that task (``joins``) while the budget left covers them all."""
    if not ranked:
        return None
    lead = ranked[0]
    drawn, cap = book.drawn.get(lead.task, 0), book.caps.get(lead.task, lead.target)
    target, step = lead.target, GROWTH * max(last, book.first_look)
    if lead.rank == OPEN and target > drawn:  # towards a PASS: geometric, whole batches
        target = drawn + draw_size(target - drawn, last or book.first_look, book.batch, cap - drawn)
    elif lead.rank == OPEN:  # catching up on samples the baseline holds: a batch of them at least, none new
        target = min(drawn, lead.have + max(lead.pairs, book.batch))
    elif target > drawn:  # a FAIL or a first look: what it needs, at most GROWTH x the last draw (an estimate
        target = drawn + min(target - drawn, step)  # from few pairs is rough: look again before drawing more)
    target = min(max(target, lead.have + 1), cap)
    joined = [lead.variant]
    for w in ranked[1:]:
        if w.task == lead.task and w.variant not in joined and joins(lead, w):
            trial = joined + [w.variant]
            if left is None or draw_seconds(book, lead.task, trial, target) <= left:
                joined = trial
    return Draw(lead.task, tuple(joined), target, f"{lead.variant}: {RANK_WORDS[lead.rank]}, ~{lead.pairs} pairs"
                + (f" (~{lead.seconds:.0f} s)" if lead.seconds else ""))


def joins(lead: Want, w: Want) -> bool:
    """Whether ``w`` may join ``lead``'s draw: a variant heading to a FAIL or taking a first look joins any draw
    of its task (it shares the baseline's samples); one that only wants pairs towards a PASS joins only a draw
    towards a PASS, so a draw chasing a FAIL is not made dearer by pairs ranked after every FAIL."""
    return w.rank != OPEN or lead.rank == OPEN


def draw_seconds(book: Book, task: str, variants: Sequence[str], target: int) -> float:
    """Seconds a draw of ``task`` up to ``target`` costs: the baseline's new samples past what it holds, and each
    variant's pairs past what it holds."""
    base_have = book.have.get(book.base, {}).get(task, 0)
    seconds = book.costs.base_seconds(task, max(0, target - base_have), base_have, book.base)
    return seconds + sum(max(0, target - book.have.get(v, {}).get(task, 0)) * book.costs.expected(v, task)
                         for v in variants)
