"""core.costs: what the baseline's answers cost, as the planner and the report both count it."""
from __future__ import annotations

import pytest

from evalsuite.core.costs import RunCosts, StoredBaseline, baseline_rate
from evalsuite.store.state import RunState


def test_the_baselines_rate_is_measured_then_recorded_then_whatever_was_seen():
    stored = StoredBaseline(held=48, seconds=4.0)
    assert baseline_rate(stored, None) == 4.0
    assert baseline_rate(stored, [3.0, 2]) == 4.0  # 2 samples: a cut batch, not trusted over the record
    assert baseline_rate(stored, [16.0, 8]) == 2.0  # measured here from 8 samples on
    assert baseline_rate(StoredBaseline(), [3.0, 2]) == 1.5  # nothing recorded: what was measured
    assert baseline_rate(StoredBaseline(), None) == 0.0


def test_a_runs_costs_survive_its_meta():
    """What the planner records (``to_state``) is what a resumed run and the report read back (``from_state``)."""
    costs = RunCosts(stored={"needle": StoredBaseline(48, 4.8)})
    costs.add("kv", "needle", 12.0, 8)
    costs.add("kv", "needle", 4.0, 8)
    state = RunState(**costs.to_state())
    assert state.seconds_per_pair == {"kv/needle": 1.0}
    back = RunCosts.from_state(state)
    assert back == costs and back.held("needle") == 48 and back.per_pair("kv", "needle") == 1.0
    assert back.base_seconds("needle", 16, 40, "bf16") == pytest.approx(8 * 4.8)  # 48-55 past the stored 48
