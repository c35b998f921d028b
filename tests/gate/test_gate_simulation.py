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


# --- several tasks per variant: per-task, slice, flip and pooled checks together ------------------------------

@pytest.fixture(scope="module")
def multi(sim):
    import gate_simulation_tasks as m  # beside gate_simulation.py, which put its folder on sys.path

    return m, [(sc, m.run(sc, 200, 112, seed=21 + i), m.run(sc, 200, 112, seed=21 + i, use_pooled=False))
               for i, sc in enumerate(m.scenarios())]


@pytest.mark.slow
def test_several_tasks_keep_both_error_rates(multi) -> None:
    _, rows = multi
    for sc, a, _ in rows:
        wrong = 2 if sc.kind == "none" else 0  # FAIL under no change / within tolerance; PASS under a drop
        assert np.mean(a["verdict"] == wrong) <= MARGIN, sc
        assert (a["look_fail"] if wrong == 2 else a["look_pass"]).max() <= MARGIN, sc  # any single look


@pytest.mark.slow
def test_the_pooled_check_buys_power_on_a_drop_everywhere(multi) -> None:
    _, rows = multi
    for sc, a, plain in rows:
        if sc.label == "2x drop on every task":
            assert np.mean(a["verdict"] == 2) >= np.mean(plain["verdict"] == 2), sc  # never less power
            if sc.churn <= 0.01:
                assert np.mean(a["verdict"] == 2) >= 0.8 and np.mean(plain["verdict"] == 2) < 0.85, sc
    gained = [np.mean(a["verdict"] == 2) - np.mean(p["verdict"] == 2) for sc, a, p in rows
              if sc.label == "2x drop on every task"]
    assert np.mean(gained) > 0.05  # ~+10 points on average at 112 pairs per task


@pytest.mark.slow
def test_multi_bulk_agrees_with_gate_run(multi) -> None:
    m, rows = multi
    for sc, a, _ in rows[::3]:
        for r in range(3):
            assert m.replay(a["codes"], r, int(a["used"][r])) == int(a["verdict"][r]), sc


@pytest.mark.slow
def test_an_adaptive_allocation_keeps_false_fail_within_tolerance(multi) -> None:
    """Later rounds draw where a FAIL looks near (Rounds.quickest_first); made adversarial here (every draw to the
    task with the lowest observed margin), a variant within its tolerance on every task still rarely FAILs."""
    m, _ = multi
    for i, sc in enumerate(s for s in m.scenarios() if s.kind == "none" and s.churn in (0.01, 0.05)):
        a = m.adaptive(sc, 200, 480, seed=31 + i)
        assert a["false_fail"] <= MARGIN, sc
        assert a["most_drawn"] > 240  # the allocation did concentrate (not lockstep)
