"""A small run of benchmarks/gate_simulation.py: the sequential gate keeps its error rates under repeated looks."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "gate_simulation.py"


@pytest.fixture(scope="module")
def sim():
    spec = importlib.util.spec_from_file_location("gate_simulation", _PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gate_simulation", mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@pytest.fixture(scope="module")
def rows(sim):
    return sim.simulate(0.05, reps=200, cap=300, rnd=10, fixed_max=300, seed=11)


# 200 runs per scenario: a true 5% rate exceeds 9% with probability < 0.5%
MARGIN = 0.09


def test_no_false_fail_under_no_change(rows) -> None:
    for r in rows:
        if r["sc"].kind == "none":
            assert np.mean(r["verdict"] == 2) <= MARGIN, r["sc"]  # stopped on a FAIL at any look
            assert r["look_fail"].max() <= MARGIN, r["sc"]


def test_no_false_pass_at_or_beyond_the_tolerance(rows) -> None:
    for r in rows:
        if r["sc"].kind in ("boundary", "drop"):
            assert np.mean(r["verdict"] == 0) <= MARGIN, r["sc"]
            assert r["look_pass"].max() <= MARGIN, r["sc"]  # gated once at any n from 10 up


def test_easy_cases_stop_early(rows, sim) -> None:
    by = {(r["sc"].label, r["sc"].churn): r for r in rows}
    copy, collapse = by[("no change", 0.0)], by[("collapse 0.6 -> 0.1", 0.0)]
    assert (copy["verdict"] == 0).all() and copy["used"].max() <= 100
    assert (collapse["verdict"] == 2).all() and collapse["used"].max() <= 40
    assert sim.noop_n(0.05) <= 100


def test_bulk_agrees_with_gate_run(rows, sim) -> None:
    agree, total = sim.check_replay(rows, 0.05, 2)
    assert agree == total
