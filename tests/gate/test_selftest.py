"""`make selftest` in CI at small n: on the embedded model a no-op must PASS and a destroyed variant must FAIL."""
from __future__ import annotations

import pytest

from evalsuite.gate.policy import load_policy
from evalsuite.gate.store_gate import gate_store


@pytest.mark.embedded
def test_the_controls_pass_and_fail_on_the_embedded_model(embedded, tmp_path):
    """w4g32 re-quantizes this Q4_1 model onto its own grid (its answers are the baseline's: PASS at reasoning's
    max_drop 0.10 from 38 pairs); w2g32 destroys it (mean KLD ~7.8: FAIL)."""
    from evalsuite.run.prepare import PreparedTask
    from evalsuite.tasks.reasoning import ReasoningTask
    from tests.conftest import run_model

    task = ReasoningTask()
    params = task.params({"per_cell": 10, "max_new_tokens": 48})
    tasks = [PreparedTask(task, params, task.gen_settings(params), task.samples(params, 1234), 1234)]
    store = run_model(embedded, tmp_path / "selftest", ("bf16", "w4g32", "w2g32"), tasks=tasks, batch_size=20)
    gate = gate_store(store, None).gate
    assert gate.variant_verdicts == {"w4g32": "PASS", "w2g32": "FAIL"}, [c.reason for c in gate.checks]
    (kld,) = [c for c in gate.checks if c.variant == "w2g32" and c.check == "max_kld"]
    assert kld.verdict == "FAIL" and kld.n == 40
    assert load_policy().thresholds("reasoning").max_drop == 0.10
