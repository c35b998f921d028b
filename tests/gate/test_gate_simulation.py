"""A small run of benchmarks/sim/gate_simulation.py: the sequential gate keeps its error rates under repeated looks."""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def sim():
    from benchmarks.sim import gate_simulation

    return gate_simulation


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


# --- several tasks per variant, through the real gate (benchmarks/sim/gate_simulation_tasks.py) -----------------

REPS = 300


def mc_error(alpha: float) -> float:
    """1.96 standard errors of a rate of ``alpha`` over REPS runs: a variant-level false-FAIL rate truly at alpha
    exceeds alpha + this with probability 2.5%."""
    return 1.96 * (alpha * (1 - alpha) / REPS) ** 0.5


@pytest.fixture(scope="module")
def multi(sim):
    from benchmarks.sim import gate_simulation_tasks as m

    m.memoize_numerics()
    (sc,) = [s for s in m.scenarios((0.05,)) if s.label == "1.0x every tolerance"]
    return m, {(mode, a): m.run(sc, REPS, mode, seed=57, alpha=a) for a in (0.05, 0.3) for mode in m.MODES}


def fail_rate(m, res) -> float:
    return float(np.mean(m.at_budget(res, 240) == 2))


@pytest.mark.slow
def test_a_variant_at_every_tolerance_fails_at_most_alpha(multi) -> None:
    """Four tasks, every gated row exactly at its tolerance (5% churn), looks at 16, 48, 112, 240 pairs per task,
    stopped at the first decisive one, every verdict from evaluate_gate: under family_alpha the variant's false
    FAIL stays within alpha (the shipped 5%, and 30%) up to the Monte Carlo error."""
    m, runs = multi
    for a in (0.05, 0.3):
        assert fail_rate(m, runs[("family_alpha", a)]) <= a + mc_error(a), a
    assert (runs[("per_check", 0.05)]["first"] < 4).any()  # some runs were decided early: stopping was exercised


@pytest.mark.slow
def test_per_check_alpha_breaks_the_same_bound(multi) -> None:
    """The test above can fail: on the same draws, eleven checks each at alpha (per_check) FAIL the variant more
    often than alpha + its error. At 5% the union's excess is within what 300 runs resolve (5-7% in the docs'
    tables), so the sensitivity is shown at alpha 30%, where it is not (~44%)."""
    m, runs = multi
    assert fail_rate(m, runs[("per_check", 0.3)]) > 0.3 + mc_error(0.3)
    assert fail_rate(m, runs[("per_check", 0.05)]) >= fail_rate(m, runs[("family_alpha", 0.05)])


@pytest.mark.slow
def test_the_family_guarantee_is_stated_and_named(multi) -> None:
    m, runs = multi
    g = m.gate_at(m.look_key(runs[("family_alpha", 0.05)]["codes"], 0, 240), "family_alpha")
    assert g.guarantee == {"q": "false FAIL ≤ 5% per variant (family-wise over 11 checks, the pooled check at 2.5%)"}
    assert {round(c.alpha, 6) for c in g.checks if c.check == "max_drop"} == {0.0025}


# --- the KLD dimension (benchmarks/sim/gate_simulation_kld.py) -----------------------------------------------------

KLD_REPS = 150


@pytest.fixture(scope="module")
def kld_run():
    from benchmarks.sim import gate_simulation_kld as k

    k.gst.memoize_numerics()

    (case,) = [c for c in k.kld_cases() if c.kld == 1.0 and c.shape == "lognormal"]
    return k, k.run(case, KLD_REPS, seed=61)


@pytest.mark.slow
def test_heavy_tailed_kld_at_max_kld_fails_at_most_alpha(kld_run) -> None:
    """Accuracy unchanged, per-sample KLD lognormal (sigma 1.5) with its mean exactly at max_kld 0.5, four tasks at
    the runner's looks: with max_kld set, its sequences inside the family FAIL the variant at most alpha (+ Monte
    Carlo error); the former point check on the sample mean FAILed most of them; the shipped screen never does."""
    k, res = kld_run
    fails = {m: float(np.mean(k.at_budget(res["modes"][m], res["looks"], 240) == 2)) for m in k.MODES}
    assert fails["gated"] <= 0.05 + 1.96 * (0.05 * 0.95 / KLD_REPS) ** 0.5
    assert fails["point"] > 0.5 and fails["screen"] == 0.0


@pytest.mark.slow
def test_kld_verdicts_agree_with_evaluate_gate(kld_run) -> None:
    """The simulation's KLD decisions are the gate's: replayed through evaluate_gate with the per-sample KLD on the
    rows, no look's verdict differs."""
    k, res = kld_run
    differ, total = k.replay(res, 3)
    assert differ == 0 and total >= 3
