"""A variant's false-FAIL guarantee (gate.family): which checks share alpha, the level each FAILs at, and what the
policy, the reasons and the scheduler's estimates say about it."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from evalsuite.store.records import SampleResult
from evalsuite.errors import EvalsuiteError
from evalsuite.gate.decide import decision
from evalsuite.gate.family import POOLED_SHARE, family
from evalsuite.gate.policy import load_policy, parse_policy
from evalsuite.gate.types import worst
from evalsuite.gate.verdict import evaluate_gate, gate_run
from evalsuite.stats import sequential as seq

TASKS = ("reasoning", "json", "code", "needle")
PER_CHECK = dataclasses.replace(load_policy(), false_fail="per_check")


def recs(variant: str, n: int, lost: dict[str, int], task_list=TASKS, metric=None) -> list[SampleResult]:
    """Baseline right on every other sample; the variant loses the first ``lost[task]`` of those."""
    out = []
    for task in task_list:
        for i in range(n):
            right = i % 2 == 0 and not (variant != "bf16" and i // 2 < lost.get(task, 0))
            meta = {"context_len": 2048 if i % 3 == 2 else 512} if task == "needle" else {}
            metrics = metric(variant, task, i) if metric else {}
            out.append(SampleResult(variant, task, "1", f"{task}-{i}", f"h{task}{i}", str(right), float(right),
                                    metadata=meta, metrics=metrics))
    return out


def gate(n: int, lost: dict[str, int], policy=None, task_list=TASKS, expected=TASKS, **kw):
    return gate_run(recs("bf16", n, {}, task_list, **kw), {"q": recs("q", n, lost, task_list, **kw)}, {},
                    policy or load_policy(), set(TASKS), expected_tasks=list(expected))[1]


def check(g, task: str, name: str = "max_drop", slice_name: str = "all"):
    (c,) = [c for c in g.checks if (c.task, c.check, c.slice) == (task, name, slice_name)]
    return c


def test_the_shipped_family_shares_alpha_over_eleven_checks() -> None:
    f = family(load_policy(), TASKS)
    assert len(f.levels) == 11 and sum(f.levels.values()) == pytest.approx(0.05)
    assert f.level("*", "all", "pooled_max_drop") == pytest.approx(0.05 * POOLED_SHARE)
    others = [v for k, v in f.levels.items() if k[0] != "*"]
    assert others == pytest.approx([0.05 * (1 - POOLED_SHARE) / 10] * 10)  # every task and slice check alike
    assert f.level("needle", "context_len>=2048", "max_flip_rate") == pytest.approx(0.0025)
    assert f.describe() == "false FAIL ≤ 5% per variant (family-wise over 11 checks, the pooled check at 2.5%)"
    per = family(PER_CHECK, TASKS)
    assert per.level("code", "all", "max_drop") == 0.05 and "per check, up to 55% per variant" in per.describe()
    one = family(load_policy(), ["code"])  # one task: no pooled check, its two checks split alpha
    assert one.levels == {("code", "all", "max_drop"): 0.025, ("code", "all", "max_flip_rate"): 0.025}


def test_every_check_that_can_fail_joins_the_family() -> None:
    p = parse_policy({"defaults": {"min_recovery": 0.9, "min_score": 0.1, "max_kld": 0.5},
                      "tasks": {"json": {"metrics": {"valid": {"max_drop": 0.1}, "refused": {"max_rise": 0.05}}}}})
    f = family(p, ["json", "code"])
    keys = set(f.levels)
    assert ("json", "all", "metric:valid:max_drop") in keys and ("json", "all", "metric:refused:max_rise") in keys
    assert {("code", "all", c) for c in ("min_recovery", "max_kld", "min_score")} <= keys
    assert len(keys) == 2 * 5 + 2 + 1 and "over 13 checks" in f.describe()
    assert not any(k[2] in ("max_kld", "min_score") for k in family(load_policy(), TASKS).levels)  # off: a screen


def test_a_task_without_samples_holds_its_share() -> None:
    """The family is fixed by the policy and the run's tasks: one not sampled yet changes no other check's level."""
    full = gate(40, {"code": 8})
    missing = gate(40, {"code": 8}, task_list=("reasoning", "json", "code"))  # needle expected, never drawn
    a, b = check(full, "code"), check(missing, "code")
    assert a.alpha == b.alpha == pytest.approx(0.0025) and a.ci == b.ci and a.more_needed == b.more_needed
    assert check(full, "*", "pooled_max_drop").alpha == check(missing, "*", "pooled_max_drop").alpha == 0.025
    assert check(missing, "needle", "min_samples").verdict == "INCONCLUSIVE"
    assert full.guarantee == missing.guarantee == {"q": family(load_policy(), TASKS).describe()}


def test_a_fail_at_the_per_check_level_waits_for_the_family_level() -> None:
    # code loses 9 of its 20 right answers at n=40: upper CS at 5% is below -0.05, not at 0.25%
    lost = {"code": 9}
    before, after = check(gate(40, lost, PER_CHECK), "code"), check(gate(40, lost), "code")
    assert before.verdict == "FAIL" and before.alpha == 0.05 and "upper at" not in before.reason
    assert after.verdict == "INCONCLUSIVE" and after.alpha == pytest.approx(0.0025)
    assert "(upper at 0.25%)" in after.reason and after.ci[1] > before.ci[1]
    assert after.ci[0] == pytest.approx(before.ci[0])  # the PASS side stays at alpha
    up = seq.lower_bound(np.array([1.0, 0.5, 0.0]), np.array([9.0, 31.0, 0.0]), 0.0025)  # 1 - y, at 0.25%
    assert after.ci[1] == pytest.approx(1 - 2 * up)  # the upper bound of Δ, from the counts
    total = 40 + after.more_needed
    more = gate(total, {"code": math.ceil(9 * total / 40)})
    assert check(more, "code").verdict == "FAIL"  # the estimate prices the split level
    assert decision(gate(40, lost)).failing["q"]["code"] == after.more_needed  # the scheduler's heading-to-FAIL


def test_pass_needs_the_same_evidence_as_before() -> None:
    for policy in (load_policy(), PER_CHECK):
        assert check(gate(76, {}, policy), "code").verdict == "INCONCLUSIVE"
        assert check(gate(78, {}, policy), "code").verdict == "PASS"  # a copy PASSes max_drop 0.05 from n=77


def test_flip_rate_and_metric_fail_sides_use_the_split_level() -> None:
    def churn(variant, task, i):  # the variant refuses where the baseline did not on i % 4 == 0: +0.25
        return {"refused": float(variant != "bf16" and i % 4 == 0)}
    p = parse_policy({"defaults": {"max_flip_rate": 0.05},
                      "tasks": {"json": {"metrics": {"refused": {"max_rise": 0.1}}}}})
    per = dataclasses.replace(p, false_fail="per_check")
    a, b = gate(60, {"json": 8}, per, metric=churn), gate(60, {"json": 8}, p, metric=churn)
    fa, fb = check(a, "json", "max_flip_rate"), check(b, "json", "max_flip_rate")
    assert fa.ci[0] > fb.ci[0] and fa.ci[1] == pytest.approx(fb.ci[1]) and "(lower at" in fb.reason
    ma, mb = check(a, "json", "metric:refused:max_rise"), check(b, "json", "metric:refused:max_rise")
    assert ma.verdict == "FAIL" and mb.verdict == "INCONCLUSIVE" and mb.alpha < ma.alpha
    assert ma.ci[0] > mb.ci[0] and ma.ci[1] == pytest.approx(mb.ci[1])


def test_policy_keys_alpha_and_false_fail() -> None:
    p = parse_policy({"defaults": {"alpha": 0.1, "false_fail": "per_check"}})
    assert p.alpha == 0.1 and p.false_fail == "per_check" and p.to_dict()["false_fail"] == "per_check"
    shipped = load_policy()
    assert shipped.alpha == 0.05 and shipped.false_fail == "family_alpha" and shipped.to_dict()["alpha"] == 0.05
    loose = dataclasses.replace(shipped, alpha=0.2)
    assert check(gate(60, {}, loose), "code").verdict == "PASS"  # a larger alpha PASSes a copy sooner


@pytest.mark.parametrize("doc, match", [
    ({"defaults": {"false_fail": "family"}}, r"defaults.false_fail: must be 'family_alpha' or 'per_check', got "
                                             r"'family' \(did you mean 'family_alpha'\?\)"),
    ({"defaults": {"alpha": 0}}, r"defaults.alpha: must be a number in \(0, 0.5\], got 0"),
    ({"defaults": {"alpha": "5%"}}, r"defaults.alpha: must be a number"),
    ({"defaults": {"alpah": 0.05}}, r"unknown key 'alpah' \(did you mean 'alpha'\?\)"),
    ({"tasks": {"code": {"false_fail": "per_check"}}}, r"tasks.code: false_fail is policy-wide"),
])
def test_policy_key_errors(doc: dict, match: str) -> None:
    with pytest.raises(EvalsuiteError, match=match) as err:
        parse_policy(doc, "my.yaml")
    assert "\n" not in str(err.value)


def test_worst_is_one_function() -> None:
    assert worst(["PASS", "FAIL", "INCONCLUSIVE"]) == "FAIL" and worst(["PASS", "INCONCLUSIVE"]) == "INCONCLUSIVE"
    assert worst([]) == "PASS" and worst([], None) is None  # the gate's empty verdict, the report's
    assert evaluate_gate([], load_policy(), []).overall == "PASS"
