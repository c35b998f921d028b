"""`make selftest` in CI at small n: on the embedded model a destroyed variant (w2g32) must FAIL. The no-op half
(w4g32 must PASS) needs 38+ pairs per task and runs in `make selftest`, not here (CI time)."""
from __future__ import annotations

from pathlib import Path

import pytest

import evalsuite.gate
from evalsuite.gate.store_gate import gate_store

SELFTEST_POLICY = Path(evalsuite.gate.__file__).parent / "selftest_policy.yaml"  # what `make selftest` passes


@pytest.mark.embedded
def test_the_destroyed_control_fails_on_the_embedded_model(embedded, tmp_path):
    """w2g32 FAILs at n=10: mean KLD ~7.8, far above max_kld 0.5 as `make selftest`'s policy gates it (its capped
    mean's sequence inside the family), its answers garbage."""
    from evalsuite.run.prepare import PreparedTask
    from evalsuite.tasks.reasoning import ReasoningTask
    from tests.conftest import run_model

    task = ReasoningTask()
    params = task.params({"steps": [1], "difficulties": ["easy"], "per_cell": 10, "max_new_tokens": 24})
    tasks = [PreparedTask(task, params, task.gen_settings(params), task.samples(params, 1234), 1234)]
    store = run_model(embedded, tmp_path / "selftest", ("bf16", "w2g32"), tasks=tasks, batch_size=10)
    gate = gate_store(store, SELFTEST_POLICY).gate
    assert gate.variant_verdicts == {"w2g32": "FAIL"} and gate.exit_code == 1, [c.reason for c in gate.checks]
    (kld,) = [c for c in gate.checks if c.check == "max_kld"]
    assert kld.verdict == "FAIL" and kld.n == 10 and kld.observed > 0.5
