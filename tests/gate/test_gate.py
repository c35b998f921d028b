"""The release gate: policy parsing, selector slices, three-way checks, verdicts and exit codes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.gate.policy import Condition, load_policy, parse_policy
from evalsuite.gate.verdict import evaluate_gate, gate_run, slice_checks, undecided
from evalsuite.store.records import KLDResult, SampleResult
from evalsuite.stats.types import PairedStats

TASKS = ("needle", "reasoning", "code", "json")
CTX = (512, 1024, 2048, 4096)


def records(variant: str, n: int = 40, wrong=lambda task, i, ctx: False) -> list[SampleResult]:
    """Baseline right on 3 of 4 samples; the variant is also wrong where ``wrong(task, i, ctx)``."""
    out = []
    for task in TASKS:
        for i in range(n):
            ctx = CTX[i % 4]
            score = 0.0 if i % 4 == 3 or wrong(task, i, ctx) else 1.0
            out.append(SampleResult(variant, task, "1", f"{task}-{i}", f"h{task}{i}", f"answer {score}", score,
                                    metadata={"context_len": ctx, "depth": (i // 4) % 3 / 2}))
    return out


def kld_for(variant: str, recs: list[SampleResult], value: float) -> list[KLDResult]:
    return [KLDResult(variant, r.task, r.sample_id, (value,) * 4, 4 if value == 0 else 1, 4) for r in recs]


def stat(delta: float, lo: float, hi: float, n: int = 100, base: float = 0.8, **kw) -> PairedStats:
    return PairedStats("v", "t", "all", n, base, base + delta, delta, lo, hi, binary=True, **kw)


# --- policy parsing --------------------------------------------------------------------------------------

def test_shipped_policy_loads_with_documented_values() -> None:
    p = load_policy()
    assert p.defaults.max_drop == 0.05 and p.defaults.max_flip_rate == 0.2 and p.defaults.max_kld is None
    assert p.defaults.min_samples == 10 and p.on_inconclusive == "fail"
    (rule,) = p.slices("needle")
    assert rule.name == "context_len>=2048" and p.thresholds("needle", rule).max_drop == 0.10
    assert p.thresholds("reasoning").max_drop == 0.10 and p.thresholds("unknown-task").max_drop == 0.05
    assert p.tasks["needle"].optional and p.tasks["reasoning"].optional
    json.dumps(p.to_dict())


def test_user_policy_inherits_defaults_and_null_disables(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("defaults: {max_drop: 0.02, max_kld: null, on_inconclusive: pass}\n"
                 "tasks:\n  code: {max_flip_rate: 0.5, min_recovery: 0.9}\n")
    p = load_policy(f)
    assert p.defaults.max_drop == 0.02 and p.defaults.max_kld is None and p.defaults.min_samples == 10
    assert p.thresholds("code").max_flip_rate == 0.5 and p.thresholds("code").min_recovery == 0.9
    assert p.on_inconclusive == "pass" and p.tasks.keys() == {"code"}


@pytest.mark.parametrize("doc, match", [
    ({"defaults": {"max_dorp": 0.1}}, r"defaults: unknown key 'max_dorp' \(did you mean 'max_drop'\?\)"),
    ({"tasks": {"needle": {"slices": [{"where": {"context_len": ">=2048"}, "max_flip": 1}]}}},
     r"tasks.needle.slices\[0\]: unknown key 'max_flip' \(did you mean 'max_flip_rate'\?\)"),
    ({"task": {}}, r"unknown key 'task' \(did you mean 'tasks'\?\)"),
    ({"defaults": {"max_drop": "5%"}}, r"defaults.max_drop: must be a number or null, got '5%'"),
    ({"defaults": {"max_drop": 1.5}}, r"defaults.max_drop: 1.5 is outside \[0, 1\]"),
    ({"defaults": {"min_samples": 2.5}}, r"min_samples: must be an integer"),
    ({"defaults": {"max_kld": True}}, r"max_kld: must be a number"),
    ({"defaults": {"on_inconclusive": "maybe"}}, r"must be 'fail' or 'pass'"),
    ({"tasks": {"code": {"on_inconclusive": "pass"}}}, r"on_inconclusive is policy-wide"),
    ({"tasks": {"needle": {"slices": [{"max_drop": 0.1}]}}}, r"slices\[0\].where: required"),
    ({"tasks": {"needle": {"slices": [{"where": {"context_len": ">=long"}}]}}}, r"compares with a non-number"),
    ({"tasks": {"needle": {"slices": [{"where": {"depth": 0.5}}, {"where": {"depth": 0.5}}]}}}, r"appears twice"),
    ({"tasks": ["needle"]}, r"tasks: expected a mapping"),
    ({"tasks": {"code": {"optional": "yes"}}}, r"tasks.code.optional: must be true or false"),
])
def test_policy_errors_name_the_key(doc: dict, match: str) -> None:
    with pytest.raises(EvalsuiteError, match=match) as err:
        parse_policy(doc, "my.yaml")
    assert "\n" not in str(err.value) and str(err.value).startswith("policy my.yaml: ")


def test_policy_file_errors(tmp_path: Path) -> None:
    with pytest.raises(EvalsuiteError, match="not found"):
        load_policy(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults: {max_drop: [\n")
    with pytest.raises(EvalsuiteError, match="not valid YAML") as err:
        load_policy(bad)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("cond, meta, expected", [
    ({"context_len": ">=2048"}, {"context_len": 2048}, True),
    ({"context_len": ">=2048"}, {"context_len": 1024}, False),
    ({"context_len": "<2048"}, {"context_len": "1024"}, True),  # numeric strings compare as numbers
    ({"context_len": "> 1000"}, {"context_len": "long"}, False),
    ({"context_len": 2048}, {"context_len": 2048.0}, True),
    ({"context_len": "==2048"}, {"context_len": 2048}, True),
    ({"kind": "single"}, {"kind": "single"}, True),
    ({"kind": "!=single"}, {"kind": "multi_key"}, True),
    ({"kind": ["single", "multi_key"]}, {"kind": "multi_key"}, True),
    ({"depth": [0.1, 0.5]}, {"depth": 0.9}, False),
    ({"context_len": ">=2048"}, {}, False),
    ({"context_len": ">=2048", "kind": "single"}, {"context_len": 4096, "kind": "multi_key"}, False),
])
def test_selectors(cond: dict, meta: dict, expected: bool) -> None:
    (rule,) = parse_policy({"tasks": {"t": {"slices": [{"where": cond}]}}}).slices("t")
    assert rule.matches(meta) is expected


def test_selector_names() -> None:
    assert str(Condition("context_len", ">=", 2048)) == "context_len>=2048"
    assert str(Condition("depth", "==", 0.5)) == "depth=0.5"  # same name as the automatic slice
    assert str(Condition("kind", "in", ("a", "b"))) == "kind=a|b"


# --- three-way checks ------------------------------------------------------------------------------------

@pytest.mark.parametrize("lo, hi, verdict, word", [
    (-0.04, 0.02, "PASS", "within"), (-0.05, 0.02, "PASS", "within"),
    (-0.20, -0.06, "FAIL", "exceeds"), (-0.12, 0.01, "INCONCLUSIVE", "straddles")])
def test_max_drop_three_way(lo: float, hi: float, verdict: str, word: str) -> None:
    th = load_policy().thresholds("code")
    (c,) = [c for c in slice_checks(stat((lo + hi) / 2, lo, hi), th) if c.check == "max_drop"]
    assert c.verdict == verdict and f"{word} max_drop 0.05" in c.reason and c.ci == (lo, hi)
    assert c.reason.startswith("t: Δ=") and "(n=100)" in c.reason


def test_min_recovery_ratio_from_delta_ci() -> None:
    th = parse_policy({"defaults": {"min_recovery": 0.9}}).thresholds("t")
    (c,) = [c for c in slice_checks(stat(-0.04, -0.06, -0.02, base=0.8), th) if c.check == "min_recovery"]
    assert c.ci == pytest.approx((1 - 0.06 / 0.8, 1 - 0.02 / 0.8)) and c.verdict == "PASS"
    (c,) = [c for c in slice_checks(stat(-0.2, -0.3, -0.1, base=0.5), th) if c.check == "min_recovery"]
    assert c.verdict == "FAIL" and c.observed == pytest.approx(0.6)
    (c,) = [c for c in slice_checks(stat(0.0, 0.0, 0.0, base=0.0), th) if c.check == "min_recovery"]
    assert c.verdict == "INCONCLUSIVE" and "undefined" in c.reason


def test_flip_rate_kld_min_score_and_min_samples() -> None:
    th = parse_policy({"defaults": {"min_score": 0.6, "max_kld": 0.5}}).thresholds("t")
    churn = stat(0.0, -0.06, 0.06, flips_right_to_wrong=20, flips_wrong_to_right=20, kld_mean=0.9, kld_p99=3.0,
                 kld_samples=(0.9,) * 100)
    got = {c.check: c.verdict for c in slice_checks(churn, th)}
    assert got == {"max_drop": "INCONCLUSIVE", "max_flip_rate": "FAIL", "max_kld": "FAIL", "min_score": "PASS"}
    mild = stat(0.0, -0.04, 0.04, flips_right_to_wrong=12, flips_wrong_to_right=12, kld_mean=0.1,
                kld_samples=(0.1,) * 100)
    got = {c.check: c.verdict for c in slice_checks(mild, th)}  # 24% observed, Wilson lower 16%: can't tell
    assert got["max_flip_rate"] == "INCONCLUSIVE" and got["max_kld"] == "PASS"
    pooled_only = {c.check: c for c in slice_checks(stat(0.0, -0.04, 0.04, kld_mean=0.9), th)}["max_kld"]
    assert pooled_only.verdict == "INCONCLUSIVE" and "no per-sample KLD" in pooled_only.reason  # built by hand
    (only,) = slice_checks(stat(-0.5, -0.9, -0.2, n=6), th)
    assert only.check == "min_samples" and only.verdict == "INCONCLUSIVE" and "n=6 < min_samples 10" in only.reason


# --- whole runs ------------------------------------------------------------------------------------------

def test_noop_variant_passes_with_zero_flips_and_kld() -> None:
    base = records("bf16", n=100)  # a copy needs about 80 pairs to PASS max_drop 0.05 (40 for 0.10)
    same = records("same", n=100)
    stats, gate = gate_run(base, {"same": same}, {"same": kld_for("same", same, 0.0)}, load_policy())
    assert gate.overall == "PASS" and gate.exit_code == 0 and gate.variant_verdicts == {"same": "PASS"}
    assert all(s.flip_rate == 0 and s.delta == 0 and s.kld_mean == 0 and s.agreement == 1 for s in stats)
    assert {c.check for c in gate.checks} == {"max_drop", "max_flip_rate", "pooled_max_drop"}  # KLD: a screen
    assert all(c.n == 100 and c.more_needed is None for c in gate.checks if c.slice == "all" and c.task != "*")
    assert undecided(gate) == {}
    json.dumps([s.to_dict() for s in stats] + [gate.to_dict()], allow_nan=False)


def test_destroyed_variant_fails_every_task() -> None:
    gone = records("int2", wrong=lambda *_: True)
    _, gate = gate_run(records("bf16"), {"int2": gone}, {"int2": kld_for("int2", gone, 9.0)}, load_policy())
    failed = {c.task for c in gate.checks if c.verdict == "FAIL" and c.slice == "all" and c.check == "max_drop"}
    assert failed == set(TASKS) and gate.overall == "FAIL" and gate.exit_code == 1
    assert any("exceeds max_drop" in c.reason for c in gate.checks)


def test_borderline_small_sample_is_inconclusive() -> None:
    # 32 samples per task, two right->wrong flips on code only: Δ = -0.0625, CI straddles -0.05
    var = records("w4", n=32, wrong=lambda task, i, ctx: task == "code" and i in (0, 1))
    stats, gate = gate_run(records("bf16", n=32), {"w4": var}, {}, load_policy())
    code = next(s for s in stats if s.task == "code" and s.slice == "all")
    assert code.delta == pytest.approx(-0.0625) and code.ci_low < -0.05 < code.ci_high
    assert gate.variant_verdicts["w4"] == "INCONCLUSIVE" and gate.exit_code == 1
    lenient = parse_policy({"defaults": {"on_inconclusive": "pass"}})
    again = evaluate_gate(stats, lenient)
    assert again.overall == "INCONCLUSIVE" and again.exit_code == 0


def test_selector_slice_pools_long_contexts() -> None:
    # KV-cache damage only at >= 2048 tokens, needle only: the pooled slice fails with n = 50 of 100
    var = records("kv2", n=100, wrong=lambda task, i, ctx: task == "needle" and ctx >= 2048)
    stats, gate = gate_run(records("bf16", n=100), {"kv2": var}, {}, load_policy())
    long = next(s for s in stats if s.task == "needle" and s.slice == "context_len>=2048")
    assert long.n == 50 and long.baseline_mean == 0.5 and long.variant_mean == 0.0
    (c,) = [c for c in gate.checks if c.slice == "context_len>=2048" and c.check == "max_drop"]
    assert c.verdict == "FAIL" and c.reason.startswith("needle[context_len>=2048]: Δ=-0.500")
    assert "exceeds max_drop 0.1" in c.reason and "\n" not in c.reason
    assert {c.task for c in gate.checks if c.verdict != "PASS" and c.task != "*"} == {"needle"}
    (pool,) = [c for c in gate.checks if c.task == "*"]
    assert pool.verdict != "PASS" and "lowest: needle" in pool.reason  # needle pulls the pooled margin down


def test_missing_task_and_slice_are_inconclusive() -> None:
    policy = parse_policy({"tasks": {"neddle": {}, "code": {"slices": [{"where": {"context_len": ">=8192"}}]},
                                     "extra": {"optional": True, "max_drop": 0.0}}})
    stats, gate = gate_run(records("bf16", n=100), {"same": records("same", n=100)}, {}, policy)
    reasons = {c.reason for c in gate.checks if c.verdict == "INCONCLUSIVE"}
    assert reasons == {"neddle: no samples (did you mean 'needle'?)", "code[context_len>=8192]: no samples"}
    assert gate.variant_verdicts["same"] == "INCONCLUSIVE" and gate.exit_code == 1
    assert all(c.more_needed is None for c in gate.checks if c.verdict == "INCONCLUSIVE")
    assert undecided(gate) == {}  # more samples of the tasks that ran cannot fill these gaps


def test_overall_is_worst_variant() -> None:
    base = records("bf16", n=100)
    variants = {"same": records("same", n=100), "gone": records("gone", n=100, wrong=lambda *_: True)}
    _, gate = gate_run(base, variants, {}, load_policy())
    assert gate.variant_verdicts == {"same": "PASS", "gone": "FAIL"} and gate.overall == "FAIL"


def test_inconclusive_checks_estimate_the_samples_still_needed() -> None:
    # 40 pairs of a copy: too few to PASS max_drop 0.05, and an estimate of how many more would
    base, same = records("bf16", n=40), records("same", n=40)
    gone = records("gone", n=40, wrong=lambda *_: True)
    _, gate = gate_run(base, {"same": same, "gone": gone}, {}, load_policy())
    (c,) = [c for c in gate.checks if c.variant == "same" and c.task == "code" and c.check == "max_drop"]
    assert c.verdict == "INCONCLUSIVE" and c.n == 40 and 20 <= c.more_needed <= 60
    assert "(n=40, 30 with a side right)" in c.reason and f"~{c.more_needed} more pairs" in c.reason
    _, again = gate_run(records("bf16", n=40 + c.more_needed), {"same": records("same", n=40 + c.more_needed)},
                        {}, load_policy())
    assert [x.verdict for x in again.checks if x.task == "code" and x.check == "max_drop"] == ["PASS"]
    assert gate.variant_verdicts["gone"] == "FAIL"
    assert undecided(gate) == {"same": {"code", "json", "needle"}}  # reasoning and needle's slice: max_drop 0.10
    assert all(x.more_needed is None for x in gate.checks if x.verdict != "INCONCLUSIVE")


def test_min_samples_asks_for_the_missing_pairs() -> None:
    th = load_policy().thresholds("t")
    (only,) = slice_checks(stat(0.0, -0.1, 0.1, n=6), th)
    assert only.more_needed == 4 and only.n == 6
