"""The budget bounds the whole command: it counts from the process's start (loading counts), holds back a share
for the speed probes, the gate and the report, cuts a chunk to what is left; and the baseline answers no sample
that no variant pairs."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from evalsuite.core.decision import Decision
from evalsuite.store.sqlite import Store
from evalsuite.run.pipeline import drive
from tests.run.test_decide import VARIANTS, _rounds, _runner


def test_process_started_counts_the_interpreter_start_and_the_imports():
    code = ("import time; time.sleep(0.6); from evalsuite.run.pipeline import process_started; "
            "print(time.monotonic() - process_started())")
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                               timeout=120).stdout)
    assert age >= 0.55  # the sleep before the import counts: the clock starts with the process


def _open_forever(store: Store) -> Decision:
    return Decision(verdicts={"v": "INCONCLUSIVE"}, open={"v": {"copy": 64}})


@pytest.mark.parametrize("loading_s, pairs", [(0.0, 16), (90.0, 0)])
def test_time_spent_loading_leaves_less_for_the_looks(tmp_path, loading_s, pairs):
    """100 s of budget, 5 s held back, 5 s a pair (baseline 2.5 + variant 2.5, measured by an earlier run): 95 s
    afford the first look's 16 pairs (80 s); when loading took 90 s of it (the clock started at the process's
    start), the 5 s left afford none: nothing starts, the baseline included, and the look is out of reach."""
    runner = _runner(tmp_path)
    runner.store.update_state(round_costs={"bf16/copy": [20.0, 8], "v/copy": [20.0, 8]})
    rounds = _rounds(runner, round_size=16, batch_size=32, budget_s=100.0, reserve_s=5.0,
                     started=time.monotonic() - loading_s)
    drive(runner, VARIANTS, rounds, _open_forever)
    assert len(runner.store.done_ids("v", "copy")) == pairs == len(runner.store.done_ids("bf16", "copy"))
    assert rounds.end() == rounds.started + 95.0  # the looks end before the reserve
    assert set(runner.deadlines) <= {rounds.end()}  # every chunk's baseline pass ends there
    state = runner.store.state()
    assert state.stop_reason == "every check decided or out of reach"
    assert "more than the" in state.stopped["v"]["copy"] and "of budget left" in state.stopped["v"]["copy"]


def test_no_variant_starts_past_the_budgets_end(tiny, tmp_path, monkeypatch):
    """A real run whose budget ends right after the baseline answered a chunk (the clock jumps an hour as its
    generation returns, in the second look): no variant starts a pass past the end (a chunk priced low ran a
    9-minute budget 4.5 minutes over, measured); the first look's pairs are all there, and the baseline's answers
    to the second are stored for a later run to pair."""
    from evalsuite.core.config import RunConfig
    from evalsuite.backends.inprocess.inprocess import InProcessBackend
    from evalsuite.gate.decide import store_decider
    from evalsuite.run.pipeline import execute
    from tests.run.test_rounds import _registry

    real, offset, looks = time.monotonic, [0.0], []
    monkeypatch.setattr(time, "monotonic", lambda: real() + offset[0])
    config = RunConfig(model="tiny", variants=["bf16", "w4g32", "w4g64"], tasks=["copy"], batch_size=8,
                       budget_s=1800.0, round_size=8)
    policy = tmp_path / "loose.yaml"  # no KLD or flip limit: the variants stay open for several looks
    policy.write_text("defaults: {max_kld: null, max_flip_rate: null}\n")
    backend = InProcessBackend.of(tiny, seed=config.seed)
    generate = backend.generate

    def baseline_then_jump(variant, name, task, todo, batch):
        yield from generate(variant, name, task, todo, batch)
        if name == "bf16" and len(looks) >= 2:
            offset[0] += 3600.0

    monkeypatch.setattr(backend, "generate", baseline_then_jump)
    store = execute(config, tmp_path / "r", False, backend, progress=False, log=looks.append, registry=_registry(),
                    decide=store_decider(policy))
    base = store.done_ids("bf16", "copy")
    assert len([line for line in looks if line.startswith("look ")]) == 2, looks  # the jump came in the second
    paired = store.done_ids("w4g32", "copy")
    assert len(paired) == 8 and paired == store.done_ids("w4g64", "copy") and paired < base
    assert store.meta()["stop_reason"] == "budget of 1800 s spent"
