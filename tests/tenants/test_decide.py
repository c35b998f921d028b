"""The decision per tenant on Qwen2.5-7B's shape (57,344 B/token of bf16 KV) with an 80 GiB GPU, every figure worked
out here by hand: requests at 32k per (weights, KV), the choice flipping where the tenant's context or concurrency
crosses the KV-vs-weight crossover, the runtime rule (a vLLM tenant never gets evalsuite's KV cache), the fit
deciding, INCONCLUSIVE evidence and emulations said, and "nothing serves this tenant" with its reason."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from evalsuite.gate.policy import parse_policy
from evalsuite.gate.types import CheckResult, GateResult
from evalsuite.capacity import load_config, shape_from_config
from evalsuite.capacity.serve import Workload
from evalsuite.tenants.decide import RunFacts, decide_tenant, exit_code
from evalsuite.tenants.forms import form_of_spec
from evalsuite.tenants.spec import Tenant

GIB = 2**30
SHAPE = shape_from_config(load_config(Path(__file__).parents[1] / "data" / "configs" / "qwen2.5-7b.json"))
# Qwen2.5-7B: 28 layers x (q, o 3584x3584; k, v 3584x512; gate, up, down 3584x18944), lm_head untied (excluded)
LINEAR = 28 * (2 * 3584 * 3584 + 2 * 3584 * 512 + 3 * 3584 * 18944)  # 6,525,288,448
PARAMS = 7_615_616_512
W16 = 2 * PARAMS
W4 = LINEAR // 2 + LINEAR // 128 * 4 + 2 * (PARAMS - LINEAR)  # int4 + a bf16 scale and zero per 128
K16 = 2 * 28 * 4 * 128 * 2  # 57,344 B/token
K4 = 2 * 28 * 4 * 128 * (0.5 + 4 / 32)  # kv4g32: 17,920 B/token; the newest 127 tokens still bf16 (worst case)
USABLE = 80 * GIB - 8 * GIB  # reserve 10%


def kv16(ctx: int) -> float:
    return ctx * K16


def kv4(ctx: int) -> float:
    return 127 * K16 + (ctx - 127) * K4


def tenant(ctx: int, n: int, objective: str = "decode_speed", runtime: str = "any", gpus: int = 1,
           gpu_mem: int = 80 * GIB, policy: dict | None = None, top: int | None = None,
           target: float | None = None) -> Tenant:
    work = Workload(ctx, top or ctx, n, gpu_mem, gpus, gpu_mem // 10)
    return Tenant("t", work, runtime, objective, parse_policy(policy or {}), target)


def facts(*variants: str) -> RunFacts:
    names = ("bf16", *variants)
    return RunFacts("bf16", list(variants), {v: form_of_spec(v) for v in names}, SHAPE, measured=False,
                    longest_needle=32768)


def passing(*variants: str) -> GateResult:
    return GateResult(variant_verdicts={v: "PASS" for v in variants})


def test_requests_that_fit_at_32k_per_weights_and_kv():
    assert W4 == 5_647_215_616 and K4 == 17_920
    expected = {"bf16": (W16, kv16), "w4g128": (W4, kv16), "kv4g32": (W16, kv4), "w4g128+kv4g32": (W4, kv4)}
    by_hand = {v: math.floor((USABLE - w) / kv(32768)) for v, (w, kv) in expected.items()}
    assert by_hand == {"bf16": 33, "w4g128": 38, "kv4g32": 104, "w4g128+kv4g32": 121}
    f = facts("w4g128", "kv4g32", "w4g128+kv4g32")
    gate = passing(*f.variants)
    d = decide_tenant(tenant(32768, 1, "requests_per_gpu"), gate, f)
    assert d.variant == "w4g128+kv4g32" and d.requests_per_gpu == 121
    got = {r.variant: r.why for r in d.rejected}
    for v in ("w4g128", "kv4g32"):
        assert f"{by_hand[v]:.1f} req/GPU" in got[v]  # each loser's line names its own figure
    base = decide_tenant(tenant(32768, 1, "requests_per_gpu"), GateResult(variant_verdicts={}), facts())
    assert base.status == "baseline" and base.requests_per_gpu == 33


@pytest.mark.parametrize("ctx, n", [(32768, 4), (32768, 16), (16384, 8), (32768, 8)])
def test_choice_flips_at_the_kv_vs_weight_crossover(ctx, n):
    """Decode speed: w4g128 reads W4 + n·KV16(ctx) per step, kv4g32 W16 + n·KV4(ctx); the KV-only variant is
    faster once n·(KV16 − KV4) exceeds the weight bytes w4g128 saves."""
    step_w4, step_kv4, step_base = W4 + n * kv16(ctx), W16 + n * kv4(ctx), W16 + n * kv16(ctx)
    crossover_n = (W16 - W4) / (kv16(ctx) - kv4(ctx))  # 7.45 requests at 32k, 14.95 at 16k
    expected = "kv4g32r128" if n > crossover_n else "w4g128"
    d = decide_tenant(tenant(ctx, n), passing("w4g128", "kv4g32r128"), facts("w4g128", "kv4g32r128"))
    assert d.variant == expected
    assert d.decode_speedup == pytest.approx(step_base / min(step_w4, step_kv4))
    assert d.speed_source == "predicted"
    assert [r.stage for r in d.rejected] == ["objective"]


def test_fewest_gpus_splits_a_replica_when_it_saves_gpus():
    """78 requests at 32k: w4g128 holds 38 on one GPU (3 GPUs for 78), 79 on a 2-GPU replica (its weights once:
    2 GPUs); at 64 both take 2 GPUs and the smaller replica is kept. kv4g32 holds 104 on one."""
    assert math.floor((2 * USABLE - W4) / kv16(32768)) == 79
    d = decide_tenant(tenant(32768, 78, "gpus", gpus=3), passing("w4g128"), facts("w4g128"))
    assert (d.variant, d.gpus_needed, d.requests_per_gpu) == ("w4g128", 2, 79 / 2)
    d = decide_tenant(tenant(32768, 64, "gpus", gpus=3), passing("w4g128"), facts("w4g128"))
    assert (d.variant, d.gpus_needed, d.requests_per_gpu) == ("w4g128", 2, 38)
    d = decide_tenant(tenant(32768, 64, "gpus", gpus=1), passing("w4g128", "kv4g32r128"),
                      facts("w4g128", "kv4g32r128"))
    assert d.variant == "kv4g32r128" and d.gpus_needed == 1
    (r,) = d.rejected
    assert (r.variant, r.stage) == ("w4g128", "fit") and "64 requests at 32,768 tokens need 2 GPUs" in r.why


def test_vllm_tenant_never_gets_evalsuites_kv_cache_and_emulations_are_marked():
    f = facts("w4g128", "kv4g32r128", "w4g128+kv4g32r128", "vkvf8")
    d = decide_tenant(tenant(32768, 64, "requests_per_gpu", runtime="vllm"), passing(*f.variants), f)
    runtime = {r.variant: r.why for r in d.rejected if r.stage == "runtime"}
    assert set(runtime) == {"kv4g32r128", "w4g128+kv4g32r128"}
    assert all("vllm serves no evalsuite kv4g32r128 KV cache" in w for w in runtime.values())
    # vLLM's own FP8 cache (1 byte a value, no scales) holds more 32k requests than bf16 KV with int4 weights
    assert d.variant == "vkvf8" and d.requests_per_gpu == math.floor((USABLE - W16) / (32768 * K16 / 2))
    d = decide_tenant(tenant(32768, 4, runtime="vllm"), passing("w4g128", "vkvf8"), facts("w4g128", "vkvf8"))
    assert d.variant == "w4g128"  # few requests: the weights dominate
    assert any("in-process emulation of int4 g128 weights: gate the artifact (`ckpt:`) before shipping" in n
               for n in d.notes)
    t = decide_tenant(tenant(32768, 4, runtime="transformers"), passing("w4g128"), facts("w4g128"))
    assert t.variant == "w4g128" and not t.notes  # transformers runs what the run ran


def test_inconclusive_choice_says_so_with_its_worst_delta():
    check = CheckResult("w4g128", "json", "all", "max_drop", 0.1, -0.175, "INCONCLUSIVE", "json: Δ=-0.175 ...",
                        more_needed=40)
    other = CheckResult("w4g128", "code", "all", "max_drop", 0.1, -0.02, "INCONCLUSIVE", "code ...", more_needed=9)
    gate = GateResult([check, other], {"w4g128": "INCONCLUSIVE"})
    lenient = tenant(1024, 4, policy={"defaults": {"on_inconclusive": "pass"}})
    d = decide_tenant(lenient, gate, facts("w4g128"))
    assert d.variant == "w4g128" and d.verdict == "INCONCLUSIVE"
    assert "rests on INCONCLUSIVE evidence (on_inconclusive: pass): worst Δ json -0.175" in d.notes
    strict = decide_tenant(tenant(1024, 4), gate, facts("w4g128"))
    assert strict.status == "undecided" and strict.variant == "bf16" and exit_code([strict]) == 1
    (r,) = strict.rejected
    assert r.stage == "quality" and r.why.startswith("INCONCLUSIVE under on_inconclusive: fail; nearest: code")


def test_nothing_serves_a_tenant_says_why():
    """16 GiB, 10% reserve: 14.4 GiB usable; bf16 weights alone are 14.2 GiB, so one 32k request (1.75 GiB) does
    not fit; w4g128 FAILs; kv4 is ruled out by the runtime."""
    small = 16 * GIB
    assert W16 + kv16(32768) > small - small // 10 > W16
    gate = GateResult([CheckResult("w4g128", "needle", "all", "max_drop", 0.05, -0.3, "FAIL", "needle: Δ=-0.300")],
                      {"w4g128": "FAIL", "kv4g32r128": "PASS"})
    d = decide_tenant(tenant(32768, 1, gpu_mem=small, runtime="vllm"), gate, facts("w4g128", "kv4g32r128"))
    assert d.status == "nothing" and d.variant is None and exit_code([d]) == 1
    assert d.why_none.startswith("nothing serves this tenant: variants ruled out by runtime 1, quality 1; the "
                                 "baseline does not fit: weights 14.19 GiB + one 32,768-token request 1.75 GiB "
                                 "need 2 GPUs of 14.40 GiB usable; has 1")
    assert {r.variant: (r.stage, r.why) for r in d.rejected}["w4g128"] == ("quality", "FAIL needle: Δ=-0.300")


def test_decode_target_rules_out_slow_variants():
    d = decide_tenant(tenant(1024, 1, target=2.0), passing("kv4g32r128", "w4g128"), facts("kv4g32r128", "w4g128"))
    (r,) = d.rejected
    assert d.variant == "w4g128" and r.variant == "kv4g32r128" and r.stage == "speed"
    assert r.why.startswith("decode 1.0") and "below the target 2×" in r.why


def test_the_docs_7b_example_is_what_the_code_prints():
    """docs/tenants.md's three tenants on this shape, every variant PASSing: its printed output is this code's."""
    import re

    import yaml

    from evalsuite.cli.common import table
    from evalsuite.report.tenants import tenants_text
    from evalsuite.tenants.spec import parse_tenants

    text = (Path(__file__).parents[2] / "docs" / "tenants.md").read_text(encoding="utf-8")
    example = text[text.index("## An example on a 7B shape"):]
    doc = re.findall(r"```yaml\n(.*?)```", example, re.S)[0]
    shown = re.findall(r"```\n(tenants \(model.*?)```", example, re.S)[0]
    f = facts("w4g128", "kv4g32r128", "vkvf8")
    decisions = [decide_tenant(t, passing(*f.variants), f) for t in parse_tenants(yaml.safe_load(doc))]
    section = {"exit_code": exit_code(decisions), "decisions": [d.to_dict() for d in decisions],
               "model": "qwen2, 7.62B params, 28 layers, 4 KV heads × 128; weights from the planner's formula"}
    assert "\n".join(tenants_text(section, table)) + "\n" == shown


def test_a_served_variants_zero_bytes_are_not_measured_and_its_speed_is():
    """A vLLM-served variant stores weight_bytes 0 (vLLM reports none) and its measured ITL: the fit takes the
    formula's bytes, and a vLLM tenant's decode speed-up is the measured ITL ratio."""
    from evalsuite.store.records import VariantInfo

    served = {v: form_of_spec(v, engine="vllm") for v in ("bf16", "vkvf8")}
    infos = {"bf16": VariantInfo("bf16", {}, 0, 0, itl_s=0.030), "vkvf8": VariantInfo("vkvf8", {}, 0, 0, itl_s=0.024)}
    f = RunFacts("bf16", ["vkvf8"], served, SHAPE, infos, measured=True)
    d = decide_tenant(tenant(32768, 8, "requests_per_gpu", runtime="vllm"), passing("vkvf8"), f)
    assert d.requests_per_gpu == math.floor((USABLE - W16) / (32768 * K16 / 2))
    assert (d.decode_speedup, d.speed_source) == (pytest.approx(0.030 / 0.024), "measured on vLLM")
    t = decide_tenant(tenant(32768, 8, "requests_per_gpu", runtime="any"), passing("vkvf8"), f)
    assert t.speed_source == "predicted"  # measured on vLLM, but this tenant is not served by it
