"""Per-tenant fallback: cheapest passing variant per tenant, reasons for rejected cheaper ones, YAML parsing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.gate.policy import load_policy, parse_policy
from evalsuite.gate.tenants import Tenant, decide_tenants, load_tenants, parse_tenants, tenants_run
from evalsuite.gate.verdict import gate_run
from evalsuite.core.records import SampleResult, VariantInfo

TASKS = ("needle", "code")


def records(variant: str, wrong=lambda i: False, n: int = 480) -> list[SampleResult]:
    """Baseline right on 3 of 4 samples; the variant also wrong where ``wrong(i)``.

    480 per task: a copy of the baseline PASSes max_drop 0.02 from about 200 pairs, and the enterprise
    tenant's context_len>=4096 slice holds half of them."""
    return [SampleResult(variant, task, "1", f"{task}-{i}", f"h{task}{i}", "x",
                         0.0 if i % 4 == 3 or wrong(i) else 1.0, metadata={"context_len": (512, 4096)[i % 2]})
            for task in TASKS for i in range(n)]


def info(name: str, weight: int, kv: float | None = 512.0) -> VariantInfo:
    return VariantInfo(name, {}, weight, weight, kv)


INFOS = {"bf16": info("bf16", 800), "w2": info("w2", 100), "w4": info("w4", 200), "w8": info("w8", 400),
         "kv4": info("kv4", 800, 128.0)}
VARIANTS = {"w2": records("w2", lambda i: True),           # destroyed
            "w4": records("w4", lambda i: i % 8 == 0),     # loses 1 in 8: delta -0.125
            "w8": records("w8"), "kv4": records("kv4")}     # identical to the baseline
LENIENT = {"defaults": {"max_drop": 0.3}}
STRICT = {"defaults": {"max_drop": 0.02}}


@pytest.fixture(scope="module")
def stats():
    return gate_run(records("bf16"), VARIANTS, {}, load_policy())[0]


def tenant(name: str, doc: dict, cost: str = "weight_bytes", pref: tuple[str, ...] = ()) -> Tenant:
    return Tenant(name, parse_policy(doc), cost, pref)


def test_cheapest_passing_variant_per_tenant(stats) -> None:
    tenants = [tenant("strict", STRICT), tenant("lenient", LENIENT), tenant("kv-bound", LENIENT, "kv_bytes_per_token"),
               tenant("only-w2", {}, "preference", ("w2", "w3"))]
    got = {d.tenant: d for d in decide_tenants(stats, INFOS, tenants, "bf16")}
    assert {k: d.chosen for k, d in got.items()} == {"strict": "w8", "lenient": "w4", "kv-bound": "kv4",
                                                      "only-w2": "bf16"}
    strict = got["strict"]
    assert [r.variant for r in strict.rejected] == ["w2", "w4"] and not strict.fallback
    assert [r.verdict for r in strict.rejected] == ["FAIL", "FAIL"] and strict.verdict == "PASS"
    assert all(r.reasons and all("\n" not in x for x in r.reasons) for r in strict.rejected)
    assert any("exceeds max_drop 0.02" in x for x in strict.rejected[1].reasons)
    assert [r.variant for r in got["lenient"].rejected] == ["w2"] and got["kv-bound"].rejected == ()
    fallback = got["only-w2"]
    assert fallback.fallback and fallback.verdict is None
    assert [(r.variant, r.verdict) for r in fallback.rejected] == [("w3", None), ("w2", "FAIL")]
    assert fallback.rejected[0].reasons == ("w3: not in this run",)
    json.dumps([d.to_dict() for d in got.values()], allow_nan=False)


def test_ties_unknown_costs_and_not_cheaper(stats) -> None:
    infos = {**INFOS, "w8": info("w8", 200), "w4": info("w4", 200), "kv4": info("kv4", 900, 128.0)}
    infos.pop("w2")
    (d,) = decide_tenants(stats, infos, [tenant("t", LENIENT)], "bf16")
    assert d.chosen == "w4"  # w4 and w8 tie on bytes; the name breaks the tie
    reasons = {r.variant: r.reasons for r in d.rejected}
    assert reasons == {"w2": ("w2: no VariantInfo, cost unknown",),
                       "kv4": ("kv4: weight_bytes not cheaper than bf16",)}
    (d,) = decide_tenants(stats, infos, [tenant("t", STRICT)], "bf16")
    assert d.chosen == "w8" and [r.variant for r in d.rejected][-1] == "w4"


def test_inconclusive_accepted_only_when_policy_says_pass(stats) -> None:
    # min_samples above n makes every check INCONCLUSIVE
    doc = {"defaults": {"min_samples": 1000}}
    (d,) = decide_tenants(stats, INFOS, [tenant("t", doc)], "bf16")
    assert d.chosen == "bf16" and {r.verdict for r in d.rejected} == {"INCONCLUSIVE"}
    assert any("min_samples 1000" in x for x in d.rejected[0].reasons)
    (d,) = decide_tenants(stats, INFOS, [tenant("t", {"defaults": {**doc["defaults"], "on_inconclusive": "pass"}})],
                          "bf16")
    assert d.chosen == "w2" and d.verdict == "INCONCLUSIVE"


def test_tenants_yaml_and_run(tmp_path: Path) -> None:
    (tmp_path / "strict.yaml").write_text("defaults: {max_drop: 0.02}\n"
                                          "tasks:\n  needle:\n    slices:\n      - where: {context_len: '>=4096'}\n")
    f = tmp_path / "tenants.yaml"
    f.write_text("tenants:\n"
                 "  enterprise: {policy: strict.yaml}\n"
                 "  free: {cost: kv_bytes_per_token, policy: {defaults: {max_drop: 0.3}}}\n"
                 "  pinned: {preference: [w4, w8]}\n")
    tenants = load_tenants(f)
    assert [t.name for t in tenants] == ["enterprise", "free", "pinned"]
    assert tenants[0].policy.defaults.max_drop == 0.02 and tenants[2].cost == "preference"
    stats, decisions = tenants_run(records("bf16"), VARIANTS, {}, INFOS, tenants)
    assert any(s.slice == "context_len>=4096" and s.task == "needle" for s in stats)  # the tenant's selector
    assert [d.chosen for d in decisions] == ["w8", "kv4", "w8"]


@pytest.mark.parametrize("doc, match", [
    ({"tenants": {"a": {"cost": "weight_bytes", "preference": ["w4"]}}}, "either cost or preference"),
    ({"tenants": {"a": {"cost": "dollars"}}}, "tenants.a.cost: must be one of weight_bytes, kv_bytes_per_token"),
    ({"tenants": {"a": {"prefrence": ["w4"]}}}, r"unknown key 'prefrence' \(did you mean 'preference'\?\)"),
    ({"tenants": {"a": {"preference": []}}}, "non-empty list"),
    ({"tenants": {"a": {"policy": {"defaults": {"max_drop": 9}}}}}, r"tenants.a.policy: defaults.max_drop"),
    ({"tenants": {}}, "required"),
])
def test_tenant_errors(doc: dict, match: str) -> None:
    with pytest.raises(EvalsuiteError, match=match) as err:
        parse_tenants(doc, "t.yaml")
    assert "\n" not in str(err.value)


def test_missing_tenants_file(tmp_path: Path) -> None:
    with pytest.raises(EvalsuiteError, match="not found"):
        load_tenants(tmp_path / "nope.yaml")
