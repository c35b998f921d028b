"""Looks ask an injected decision function (no gate, no model): decided after a first look stops; kept open, the
cap or the budget ends the run; a failed variant's other tasks are never drawn, not even by the baseline; a
check heading to a FAIL draws before another task's first look; the runner's own task list is never reordered."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from evalsuite.core.config import RunConfig
from evalsuite.core.decision import Decision
from evalsuite.core.records import SampleResult
from evalsuite.core.store import Store
from evalsuite.run.prepare import PreparedTask
from evalsuite.run.rounds import Rounds
from evalsuite.run.runner import Runner
from tests.conftest import prepared


@dataclass(frozen=True)
class Ref:
    name: str
    is_baseline: bool = False


VARIANTS = [Ref("bf16", True), Ref("v")]


@dataclass
class FakeRunner:
    """The RoundsRunner protocol and nothing more: stores a row per sample Rounds asks it to run, records the
    calls (variant, task, samples stored after it)."""

    tasks: list[PreparedTask]
    store: Store
    backend: Any = None
    baseline_source: Any = None
    deadline: float | None = None
    limits: dict[str, int] = field(default_factory=dict)
    calls: list[tuple[str, str, int]] = field(default_factory=list)
    built: list[str] = field(default_factory=list)

    def round(self, variants: Sequence[Any], active: dict[str, set[str]], task_major: bool = False) -> None:
        for v, names in active.items():
            for task in (t for t in self.tasks if t.name in names):
                done = self.store.done_ids(v, task.name)
                window = task.samples[:self.limits.get(task.name, len(task.samples))]
                self.store.put_samples(SampleResult(v, task.name, "1", s.id, "h", "", 1.0) for s in window
                                       if s.id not in done)
                self.calls.append((v, task.name, len(self.store.done_ids(v, task.name))))

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def copies_baseline(self, variant: Any) -> bool:
        self.built.append(variant.name)  # Rounds builds every variant before it times a task
        return False

    def set_deadline(self, deadline: float | None) -> None:
        self.deadline = deadline

    def set_limits(self, limits: dict[str, int]) -> None:
        self.limits = dict(limits)


def _runner(tmp_path, first: int = 0, *names: str) -> FakeRunner:
    tasks = [prepared(n=200)[0]] + [prepared(type("T", (type(prepared()[0].task),), {"name": n})(), n=200)[0]
                                    for n in names]
    for task in tasks:
        task.samples = task.samples[:first]  # drawn as the stream's prefix
    return FakeRunner(tasks, Store.create(tmp_path / "r", {"tasks": [t.name for t in tasks]}))


def test_a_first_look_then_decided_stops(tmp_path):
    asked = []

    def decide(store: Store) -> Decision:
        asked.append(1)
        return Decision(verdicts={"v": "PASS" if store.done_ids("v", "copy") else "INCONCLUSIVE"}, open={})

    runner = _runner(tmp_path)
    Rounds(max_samples=100, round_size=8, batch_size=8, decide=decide, log=lambda s: None).drive(runner, VARIANTS)
    state = runner.store.state()
    assert state.rounds == 1 and state.stop_reason == "every check decided" and state.drawn == {"copy": 8}
    assert state.stopped == {"v": {"copy": "decided (PASS)"}} and state.capped == {} and state.out_of_reach == {}
    # the first chunk, while the cost is unmeasured, is a probe of 4; decided after it, the look ends there
    assert runner.calls == [("bf16", "copy", 4), ("v", "copy", 4)]
    assert runner.built == ["v"] and len(asked) == 3  # before the look, after its chunk, before the next


def test_kept_open_the_cap_ends_the_run(tmp_path):
    def decide(store: Store) -> Decision:  # open, no estimate of what it needs: drawn until the cap
        return Decision(verdicts={"v": "INCONCLUSIVE"}, open={"v": {"copy": 0}})

    runner = _runner(tmp_path)
    Rounds(max_samples=16, round_size=8, decide=decide, log=lambda s: None, batch_size=4).drive(runner, VARIANTS)
    state = runner.store.state()
    assert state.stop_reason == "sample cap reached: copy (cap 16)" and state.capped == {"copy": "cap 16"}
    assert state.drawn == {"copy": 16} and len(runner.tasks[0].samples) == 16
    assert len(runner.store.done_ids("bf16", "copy")) == 16 == len(runner.store.done_ids("v", "copy"))
    assert state.stopped == {"v": {"copy": "cap reached"}}


def test_kept_open_the_budget_ends_the_run(tmp_path):
    def decide(store: Store) -> Decision:
        return Decision(verdicts={"v": "INCONCLUSIVE"}, open={"v": {"copy": 8}})

    runner = _runner(tmp_path)
    rounds = Rounds(round_size=8, budget_s=1e-9, reserve_s=0.0, decide=decide, log=lambda s: None)
    rounds.drive(runner, VARIANTS)
    state = runner.store.state()
    assert runner.deadline == rounds.started + 1e-9 and runner.calls == []  # spent before anything started
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
    Rounds(max_samples=100, round_size=8, batch_size=8, decide=decide, log=lambda s: None).drive(runner, VARIANTS)
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
    Rounds(max_samples=100, round_size=8, batch_size=8, decide=decide, log=lambda s: None).drive(runner, VARIANTS)
    assert [c for c in runner.calls if c[1] == "other"] == []  # the FAIL came before other's first look
    assert runner.store.state().stopped["v"] == {"copy": "variant FAILed", "other": "variant FAILed"}


def test_reorder_leaves_the_given_task_list_alone(tmp_path):
    tasks = prepared(n=2) + prepared(type("Other", (type(prepared()[0].task),), {"name": "other"})(), n=2)
    store = Store.create(tmp_path / "r", {})
    runner = Runner(RunConfig(variants=["bf16"], tasks=["copy", "other"]), None, tasks, store)
    runner.reorder(["other", "copy"])
    assert [t.name for t in runner.tasks] == ["other", "copy"] and [t.name for t in tasks] == ["copy", "other"]
