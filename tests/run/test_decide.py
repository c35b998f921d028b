"""Rounds ask an injected decision function (no gate, no model): decided after one round stops after one round;
kept open, the cap or the budget ends the run; the runner's own task list is never reordered in place."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from evalsuite.core.config import RunConfig
from evalsuite.core.decision import Decision
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
    """The RoundsRunner protocol and nothing more: records what Rounds asked it to run."""

    tasks: list[PreparedTask]
    store: Store
    backend: Any = None
    baseline_source: Any = None
    deadline: float | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)
    built: list[str] = field(default_factory=list)

    def round(self, variants: Sequence[Any], active: dict[str, set[str]], task_major: bool = False) -> None:
        self.calls += [(v, t) for v, tasks in active.items() for t in sorted(tasks)]

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def copies_baseline(self, variant: Any) -> bool:
        self.built.append(variant.name)  # Rounds builds every variant before it times a task
        return False

    def cost_per_sample(self, task: str) -> float | None:
        return None

    def set_deadline(self, deadline: float | None) -> None:
        self.deadline = deadline

    def reorder(self, names: Sequence[str]) -> None:
        by_name = {t.name: t for t in self.tasks}
        self.tasks = [by_name[n] for n in names]


def _runner(tmp_path, first: int = 8) -> FakeRunner:
    (task,) = prepared(n=200)
    task.samples = task.samples[:first]  # round 1: the first samples of the stream
    return FakeRunner([task], Store.create(tmp_path / "r", {"tasks": ["copy"]}))


def test_decided_after_one_round_stops_after_one_round(tmp_path):
    asked: list[int] = []

    def decide(store: Store) -> Decision:
        asked.append(1)
        return Decision(verdicts={"v": "PASS"}, open={})

    runner = _runner(tmp_path)
    Rounds(max_samples=100, round_size=8, decide=decide, log=lambda s: None).drive(runner, VARIANTS)
    state = runner.store.state()
    assert state.rounds == 1 and state.stop_reason == "every check decided" and state.drawn == {"copy": 8}
    assert state.stopped == {"v": {"copy": "decided (PASS)"}} and state.capped == {} and state.out_of_reach == {}
    assert runner.calls == [("bf16", "copy"), ("v", "copy")] and len(asked) == 2  # after the task, after the round


def test_kept_open_the_cap_ends_the_run(tmp_path):
    def decide(store: Store) -> Decision:  # open, no estimate of what it needs: drawn until the cap
        return Decision(verdicts={"v": "INCONCLUSIVE"}, open={"v": {"copy": 0}})

    runner = _runner(tmp_path)
    Rounds(max_samples=16, round_size=8, decide=decide, log=lambda s: None, batch_size=4).drive(runner, VARIANTS)
    state = runner.store.state()
    assert state.stop_reason == "sample cap reached: copy (cap 16)" and state.capped == {"copy": "cap 16"}
    assert state.rounds == 3 and state.drawn == {"copy": 16} and len(runner.tasks[0].samples) == 16
    assert state.stopped == {"v": {"copy": "cap reached"}}


def test_kept_open_the_budget_ends_the_run(tmp_path):
    def decide(store: Store) -> Decision:
        return Decision(verdicts={"v": "INCONCLUSIVE"}, open={"v": {"copy": 8}})

    runner = _runner(tmp_path)
    rounds = Rounds(round_size=8, budget_s=1e-9, decide=decide, log=lambda s: None)
    rounds.drive(runner, VARIANTS)
    state = runner.store.state()
    assert runner.deadline == rounds.started + 1e-9 and runner.calls == []  # spent before anything started
    assert state.rounds == 1 and state.stop_reason == "budget of 1e-09 s spent"
    assert state.stopped == {"v": {"copy": "budget spent"}}


def test_a_failed_variant_stops_and_the_rest_of_the_round_skips_it(tmp_path):
    def decide(store: Store) -> Decision:
        return Decision(verdicts={"v": "FAIL"}, open={})

    runner = _runner(tmp_path)
    other = prepared(type("Other", (type(runner.tasks[0].task),), {"name": "other"})(), n=8)[0]
    runner.tasks.append(other)
    Rounds(max_samples=100, round_size=8, decide=decide, log=lambda s: None).drive(runner, VARIANTS)
    assert runner.calls == [("bf16", "copy"), ("v", "copy")]  # FAILed on copy: other is never run
    assert runner.store.state().stopped == {"v": {"copy": "variant FAILed", "other": "decided (FAIL)"}}


def test_reorder_leaves_the_given_task_list_alone(tmp_path):
    tasks = prepared(n=2) + prepared(type("Other", (type(prepared()[0].task),), {"name": "other"})(), n=2)
    store = Store.create(tmp_path / "r", {})
    runner = Runner(RunConfig(variants=["bf16"], tasks=["copy", "other"]), None, tasks, store)
    runner.reorder(["other", "copy"])
    assert [t.name for t in runner.tasks] == ["other", "copy"] and [t.name for t in tasks] == ["copy", "other"]
