"""The pooled early FAIL: one anytime-valid sequence over all of a variant's tasks (stats.pooled, gate.pooled)."""
from __future__ import annotations

import numpy as np
import pytest

from evalsuite.gate.policy import parse_policy
from evalsuite.gate.verdict import gate_run, undecided
from evalsuite.store.records import SampleResult
from evalsuite.stats import pooled
from evalsuite.stats import sequential as seq

TASKS = ("reasoning", "code", "json", "needle")
POLICY = parse_policy({"defaults": {"max_drop": 0.05, "max_flip_rate": None, "max_kld": None},
                       "tasks": {"reasoning": {"max_drop": 0.10}}})


def recs(variant: str, n: int, lost: dict[str, int]) -> list[SampleResult]:
    """Baseline right on every other sample; the variant loses the first ``lost[task]`` of those."""
    out = []
    for task in TASKS:
        for i in range(n):
            right = i % 2 == 0 and not (variant != "bf16" and i // 2 < lost.get(task, 0))
            out.append(SampleResult(variant, task, "1", f"{task}-{i}", f"h{task}{i}", str(right), float(right)))
    return out


def gate(n: int, lost: dict[str, int]):
    return gate_run(recs("bf16", n, {}), {"q": recs("q", n, lost)}, {}, POLICY, set(TASKS))[1]


def test_a_drop_on_every_task_fails_pooled_before_any_task_does() -> None:
    # 2x each task's tolerance at n = 48: reasoning -0.1875 (t 0.10), the others -0.104 (t 0.05)
    g = gate(48, {"reasoning": 9, "code": 5, "json": 5, "needle": 5})
    own = [c for c in g.checks if c.check == "max_drop"]
    assert all(c.verdict == "INCONCLUSIVE" for c in own)  # no task alone is decided yet
    (p,) = [c for c in g.checks if c.check == "pooled_max_drop"]
    assert p.verdict == "FAIL" and g.variant_verdicts["q"] == "FAIL" and p.n == 4 * 48
    assert p.ci[1] < 0 and f"CS upper {p.ci[1]:+.3f}" in p.reason and "beyond its max_drop" in p.reason
    assert "lowest: reasoning -0.087, code -0.054" in p.reason  # its own tolerance 0.10 inside the sum
    assert "FAIL" not in p.reason and "\n" not in p.reason
    assert dict(p.pools) == {t: 48 for t in TASKS}


def test_pooled_never_passes_alone_and_open_pools_keep_every_task_open() -> None:
    g = gate(48, {})  # no change: no task can be shown beyond its tolerance, but 48 pairs PASS nothing
    (p,) = [c for c in g.checks if c.check == "pooled_max_drop"]
    assert p.verdict == "INCONCLUSIVE" and g.variant_verdicts["q"] == "INCONCLUSIVE"
    assert p.more_needed is None  # no extrapolation of "no change" ever FAILs it
    g = gate(48, {"needle": 12})  # needle -0.25; pooled names it first
    (p,) = [c for c in g.checks if c.check == "pooled_max_drop"]
    assert p.reason.split("lowest: ")[1].startswith("needle -0.200")
    g = gate(200, {})
    (p,) = [c for c in g.checks if c.check == "pooled_max_drop"]
    assert p.verdict == "PASS" and g.variant_verdicts["q"] == "PASS"  # every task PASSed its own check
    g = gate(32, {"reasoning": 2, "code": 3, "json": 3, "needle": 3})
    (p,) = [c for c in g.checks if c.check == "pooled_max_drop"]
    assert p.verdict == "INCONCLUSIVE" and p.more_needed and undecided(g)["q"] == set(TASKS)


def test_pooled_bound_of_one_task_is_that_tasks_sequence() -> None:
    v, w = seq.flip_values(10, 2, 100)
    assert pooled.upper_bound([(v, w, 0.05)]) == pytest.approx(seq.diff_cs(v, w)[1] + 0.05, abs=1e-5)


def test_within_tolerance_everywhere_is_not_failed_in_simulation() -> None:
    """Every task just inside its tolerance (Δ = -0.8 t): the pooled FAIL stays rare at every look."""
    rng = np.random.default_rng(5)
    reps, looks, fails = 300, (16, 48, 112, 240), 0
    ts = (0.10, 0.05, 0.05, 0.05)
    codes = [rng.choice(3, size=(reps, looks[-1]), p=[0.8 * t + 0.02, 0.96 - 0.8 * t, 0.02]) for t in ts]
    ever = np.zeros(reps, dtype=bool)
    for n in looks:
        parts = [(np.array([0.0, 0.5, 1.0]),
                  np.stack([(c[:, :n] == k).sum(axis=1) for k in range(3)], axis=-1).astype(float), t)
                 for c, t in zip(codes, ts)]
        ever |= pooled.rejects(parts)
    fails = ever.mean()
    assert fails <= 0.05


def test_continuous_tasks_enter_with_their_differences() -> None:
    from evalsuite.gate.pooled import part, pooled_check
    from evalsuite.stats.types import PairedStats

    cont = PairedStats("q", "json", "all", 40, 0.8, 0.675, -0.125, -0.2, -0.05, binary=False,
                       diff_counts=((-0.5, 10), (0.0, 30)), n_informative=40)
    values, weights, t = part(cont, 0.05)
    assert list(values) == [0.25, 0.5] and list(weights) == [10.0, 30.0] and t == 0.05
    binary = PairedStats("q", "code", "all", 40, 0.5, 0.4, -0.1, -0.2, 0.0, binary=True, flips_right_to_wrong=4,
                         n_informative=20)
    c = pooled_check("q", [(cont, 0.05), (binary, 0.05)], tasks_passed=False)
    assert c is not None and c.n == 80 and "(n=80, 60 with a side right)" in c.reason
    assert c.observed == pytest.approx(((-0.125 + 0.05) * 40 + (-0.1 + 0.05) * 40) / 80)
    assert pooled_check("q", [(cont, 0.05)], tasks_passed=False) is None  # one task: its own check suffices


def test_the_pooled_bet_counts_every_pair_from_a_tasks_first_one() -> None:
    """A task below min_samples still bets in the pool (its pairs are not held back and added later, which would
    not be a supermartingale step); the check shows once two tasks have min_samples pairs."""
    base = [r for r in recs("bf16", 40, {}) if r.task in ("code", "json") or int(r.sample_id.split("-")[1]) < 4]
    var = [r for r in recs("q", 40, {"code": 4, "json": 4, "needle": 2})
           if r.task in ("code", "json") or int(r.sample_id.split("-")[1]) < 4]
    g = gate_run(base, {"q": var}, {}, POLICY, set(TASKS))[1]
    (p,) = [c for c in g.checks if c.check == "pooled_max_drop"]
    assert p.n == 40 + 40 + 4 + 4 and dict(p.pools)["needle"] == 4  # reasoning and needle: 4 pairs, below 10
    two_short = [r for r in base if r.task != "json" or int(r.sample_id.split("-")[1]) < 4]
    g = gate_run(two_short, {"q": [r for r in var if r.task != "json" or int(r.sample_id.split("-")[1]) < 4]}, {},
                 POLICY, set(TASKS))[1]
    assert not [c for c in g.checks if c.check == "pooled_max_drop"]  # only code has min_samples pairs


def test_the_pooled_need_from_one_task_is_its_own_pairs_and_decides_when_drawn() -> None:
    """Issue 55: the pooled check's need priced per task it may be drawn from. Drawing the task furthest beyond its
    tolerance alone needs fewer pairs than spreading them over tasks that sit inside theirs; a task inside its
    tolerance is never offered; and drawing the stated pairs (the observed mix persisting) does decide it."""
    g = gate(16, {"reasoning": 4, "needle": 1})  # reasoning -0.25 (t 0.10), needle -0.0625 (t 0.05)
    (p,) = [c for c in g.checks if c.check == "pooled_max_drop"]
    assert p.verdict == "INCONCLUSIVE" and p.more_needed
    needs = dict(p.needs_from)
    assert set(needs) == {"reasoning", "needle"}  # code and json are inside their tolerance
    assert needs["reasoning"] < p.more_needed < needs["needle"]

    def parts(reasoning_pairs: float) -> list[pooled.Part]:
        """The gated pairs, reasoning grown to ``reasoning_pairs`` with its mix (a quarter lost, the rest ties)."""
        lost = {"reasoning": reasoning_pairs / 4, "needle": 1.0}
        n = {"reasoning": reasoning_pairs}
        return [(np.array([0.0, 0.5]), np.array([lost.get(t, 0.0), n.get(t, 16.0) - lost.get(t, 0.0)]),
                 0.10 if t == "reasoning" else 0.05) for t in TASKS]

    assert not pooled.rejects(parts(16), 0.0, p.alpha)
    assert not pooled.rejects(parts(16 + needs["reasoning"] - 1), 0.0, p.alpha)
    assert pooled.rejects(parts(16 + needs["reasoning"]), 0.0, p.alpha)  # exactly the stated need decides it


def test_pooled_need_from_a_task_inside_its_tolerance_is_never() -> None:
    parts = [(np.array([0.0, 0.5]), np.array([4.0, 12.0]), 0.10), (np.array([0.5]), np.array([16.0]), 0.05)]
    assert pooled.more_needed_from(parts, 1, 0.025) == seq.MAX_MORE  # ties only: its margin is +0.05
    assert 0 < pooled.more_needed_from(parts, 0, 0.025) < pooled.more_needed(parts, 0.025)
