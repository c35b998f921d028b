"""A sequential run with ``--max-samples`` and no wall-clock budget draws the samples the stored one drew
(``tests/fixtures/stored_runs.py``, issue 65): the same ids per variant and task, and the same checks."""
from __future__ import annotations

import json

import pytest

from evalsuite.gate.store_gate import gate_store
from tests.fixtures.stored_runs import EXPECTED, RUNS, drawn_ids, sequential, snapshot, tiny_model
from tests.gate.test_stored_runs import same


@pytest.mark.slow
def test_a_sequential_run_draws_what_the_stored_one_drew(tmp_path):
    expected = json.loads(EXPECTED.read_text(encoding="utf-8"))["sequential"]
    policy = RUNS / "sequential" / "policy.yaml"
    store = sequential(tiny_model(), tmp_path / "run", policy)
    assert drawn_ids(store) == expected["drawn"]
    same(snapshot(gate_store(store, policy).gate), {k: v for k, v in expected.items() if k != "drawn"})
    store.close()
