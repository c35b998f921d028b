"""Looks ask an injected decision function (no gate, no model): decided after a first look stops; kept open, the
cap or the budget ends the run; a failed variant's other tasks are never drawn, not even by the baseline; a
check heading to a FAIL draws before another task's first look."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from evalsuite.core.decision import Decision
from evalsuite.store.records import SampleResult
from evalsuite.store.sqlite import Store
from evalsuite.run.prepare import PreparedTask
from evalsuite.run.draws import task_cap
from evalsuite.run.pipeline import drive
from evalsuite.run.rounds import Rounds
from evalsuite.run.schedule import Chunk
from tests.conftest import prepared


@dataclass(frozen=True)
class Ref:
    name: str
    is_baseline: bool = False


VARIANTS = [Ref("bf16", True), Ref("v")]


@dataclass
class FakeRunner:
    """What ``run.pipeline.drive`` uses of a Runner and nothing more: stores a row per sample of each draw's window,
    records the passes (variant, task, samples stored after it) and the draws' deadlines."""

    tasks: list[PreparedTask]
    store: Store
    backend: Any = None
    baseline_source: Any = None
    calls: list[tuple[str, str, int]] = field(default_factory=list)
    built: list[str] = field(default_factory=list)
    deadlines: list[float | None] = field(default_factory=list)

    def start(self, variants: Sequence[Any], build: bool = False) -> None:
        self.built += [v.name for v in variants[1:]] if build else []  # built before any task is timed

    def look(self, chunk: Chunk, variants: Sequence[Any]) -> list[tuple[str, str, float, int]]:
        spent = []
        for task in (t for t in self.tasks if t.name in chunk.tasks):
            if chunk.target is not None and chunk.target > len(task.samples):
                task.draw(chunk.target - len(task.samples))
            if chunk.upto == 0:
                continue
            self.deadlines.append(chunk.deadline)
            for v in [variants[0].name, *chunk.variants]:
                done = self.store.done_ids(v, task.name)
                window = task.samples[:len(task.samples) if chunk.upto is None else chunk.upto]
                self.store.put_samples(SampleResult(v, task.name, "1", s.id, "h", "", 1.0) for s in window
                                       if s.id not in done)
                self.calls.append((v, task.name, len(self.store.done_ids(v, task.name))))
                spent.append((v, task.name, 0.0, len(self.store.done_ids(v, task.name)) - len(done)))
        return spent

    def end(self, variants: Sequence[Any], deadline: float | None = None) -> None:
        pass


def _runner(tmp_path, first: int = 0, *names: str) -> FakeRunner:
    tasks = [prepared(n=200)[0]] + [prepared(type("T", (type(prepared()[0].task),), {"name": n})(), n=200)[0]
                                    for n in names]
    for task in tasks:
        task.samples = task.samples[:first]  # drawn as the stream's prefix
    return FakeRunner(tasks, Store.create(tmp_path / "r", {"tasks": [t.name for t in tasks]}))


def _rounds(runner: FakeRunner, max_samples: int | None = None, **kw: Any) -> Rounds:
    """A sequential plan over ``runner``'s tasks, quiet, continuing from the looks its store counts."""
    return Rounds(caps={t.name: task_cap(t, max_samples) for t in runner.tasks}, log=lambda s: None,
                  looks=int(runner.store.state().rounds), **kw)


def test_a_first_look_then_decided_stops(tmp_path):
    asked = []

    def decide(store: Store) -> Decision:
        asked.append(1)
        return Decision(verdicts={"v": "PASS" if store.done_ids("v", "copy") else "INCONCLUSIVE"}, open={})

    runner = _runner(tmp_path)
    drive(runner, VARIANTS, _rounds(runner, 100, round_size=8, batch_size=8), decide)
    state = runner.store.state()
    assert state.rounds == 1 and state.stop_reason == "every check decided" and state.drawn == {"copy": 8}
    assert state.stopped == {"v": {"copy": "decided (PASS)"}} and state.capped == {} and state.out_of_reach == {}
    # the first chunk, while the cost is unmeasured, is a probe of 4; decided after it, the look ends there
    assert runner.calls == [("bf16", "copy", 4), ("v", "copy", 4)]
    # asked before the look (which draws its samples first), before its chunk, and after it
    assert runner.built == ["v"] and len(asked) == 3


def test_kept_open_the_cap_ends_the_run(tmp_path):
    def decide(store: Store) -> Decision:  # open, no estimate of what it needs: drawn until the cap
        return Decision(verdicts={"v": "INCONCLUSIVE"}, open={"v": {"copy": 0}})

    runner = _runner(tmp_path)
    drive(runner, VARIANTS, _rounds(runner, 16, round_size=8, batch_size=4), decide)
    state = runner.store.state()
    assert state.stop_reason == "sample cap reached: copy (cap 16)" and state.capped == {"copy": "cap 16"}
    assert state.drawn == {"copy": 16} and len(runner.tasks[0].samples) == 16
    assert len(runner.store.done_ids("bf16", "copy")) == 16 == len(runner.store.done_ids("v", "copy"))
    assert state.stopped == {"v": {"copy": "cap reached"}}


def test_kept_open_the_budget_ends_the_run(tmp_path):
    def decide(store: Store) -> Decision:
        return Decision(verdicts={"v": "INCONCLUSIVE"}, open={"v": {"copy": 8}})

    runner = _runner(tmp_path)
    rounds = _rounds(runner, round_size=8, budget_s=1e-9, reserve_s=0.0)
    drive(runner, VARIANTS, rounds, decide)
    state = runner.store.state()
    assert rounds.end() == rounds.started + 1e-9 and runner.calls == []  # spent before anything started
    assert state.rounds == 0 and state.stop_reason == "budget of 1e-09 s spent"
    assert state.stopped == {"v": {"copy": "budget spent"}}


def test_the_budget_holds_back_a_share_for_the_end_of_the_command():
    rounds = Rounds(budget_s=600.0, started=100.0)
    assert rounds.end() == 100.0 + 600.0 - 30.0  # END_SHARE 5 %
    assert Rounds(budget_s=3600.0, started=0.0).end() == 3600.0 - 60.0  # at most END_MAX_S
    assert Rounds(budget_s=60.0, started=0.0, reserve_s=1.0).end() == 59.0 and Rounds().end() is None


def test_a_failed_variant_stops_and_its_other_tasks_are_never_drawn(tmp_path):
    def decide(store: Store) -> Decision:
        return Decision(verdicts={"v": "FAIL" if store.done_ids("v", "copy") else "INCONCLUSIVE"}, open={})

    runner = _runner(tmp_path, 0, "other")
    drive(runner, VARIANTS, _rounds(runner, 100, round_size=8, batch_size=8), decide)
    assert runner.calls == [("bf16", "copy", 4), ("v", "copy", 4)]  # FAILed on copy's first chunk: nothing more
    assert runner.store.done_ids("bf16", "other") == set()  # the baseline answered nothing v does not pair
    assert runner.store.state().stopped == {"v": {"copy": "variant FAILed", "other": "variant FAILed"}}


def test_a_check_heading_to_a_fail_draws_before_first_looks(tmp_path):
    def decide(store: Store) -> Decision:
        n = len(store.done_ids("v", "copy"))
        if n >= 12:
            return Decision(verdicts={"v": "FAIL"})
        return Decision(verdicts={"v": "INCONCLUSIVE"}, open={"v": {"copy": 4, "other": 0}},
                        failing={"v": {"copy": 4}} if n else {})

    runner = _runner(tmp_path, 0, "other")
    drive(runner, VARIANTS, _rounds(runner, 100, round_size=8, batch_size=8), decide)
    assert [c for c in runner.calls if c[1] == "other"] == []  # the FAIL came before other's first look
    assert runner.store.state().stopped["v"] == {"copy": "variant FAILed", "other": "variant FAILed"}
