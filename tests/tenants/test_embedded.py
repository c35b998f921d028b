"""`evalsuite run --tenants` on the embedded model at small n, then `evalsuite tenants`: the run draws the tenants'
slices (safety for the strict tenant, the needle at the long-document tenant's context); each tenant's choice and
its reason are worked out here by hand from the run's measured bytes and the gate's verdicts under each tenant's
policy (gate code, not the tenants code); fit, not quality, decides the long-document tenant; the vLLM tenant is
never given evalsuite's int4 KV cache; a tenant nothing serves gets exit 1 and the reason."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from tests.cli.test_exit_codes import _cli

LENIENT = {"defaults": {"min_samples": 4, "max_drop": 0.3, "max_flip_rate": 0.5, "on_inconclusive": "pass"}}
STRICT = {"defaults": {"on_inconclusive": "fail"},
          "tasks": {"safety": {"max_drop": 0.05, "slices": [{"where": {"kind": "harmful"}, "max_flip_rate": 0.0}]}}}
TENANTS = {
    "chat": {"context": 256, "concurrency": 256, "gpu_memory": "2GiB", "reserve": "0%", "runtime": "vllm",
             "objective": "requests_per_gpu", "policy": LENIENT},
    # 100 requests of 512 tokens (the longest needle the run draws) on one 1 GiB GPU: only a smaller KV cache fits
    "long-docs": {"context": 512, "concurrency": 100, "gpu_memory": "1GiB", "reserve": "0%",
                  "runtime": "transformers", "objective": "gpus", "policy": LENIENT},
    "strict-safety": {"context": 256, "concurrency": 8, "gpu_memory": "80GiB", "runtime": "transformers",
                      "policy": STRICT},
}
KV16 = 2 * 30 * 3 * 64 * 2  # SmolLM2-135M: 23,040 B/token of bf16 KV
KV4 = 2 * 30 * 3 * 64 * (0.5 + 4 / 32)  # kv4g32: 7,200 B/token; the newest 127 tokens bf16 (worst case)
GIB = 2**30


def kv_request(variant: str, ctx: int) -> float:
    return 127 * KV16 + (ctx - 127) * KV4 if "kv4" in variant else ctx * KV16


def accepted(verdict: str, policy: dict) -> bool:
    return verdict == "PASS" or (verdict == "INCONCLUSIVE" and policy["defaults"].get("on_inconclusive") == "pass")


@pytest.mark.embedded
@pytest.mark.slow
def test_three_tenants_on_a_real_run(tmp_path):
    from evalsuite.store.sqlite import Store
    from evalsuite.gate.policy import parse_policy
    from evalsuite.gate.store_gate import gate_store

    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(yaml.safe_dump({"tenants": TENANTS}))
    res = _cli("run", "--model", "default", "--variants", "w4g64,kv4g32", "--tasks", "needle", "--limit", "8",
               "--param", "needle.context_lens=[256]", "--param", "needle.kinds=[single]", "--param",
               "needle.depths=[0.5]", "--param", "needle.repeats=4", "--batch-size", "8", "--tenants", str(tenants),
               "--out", str(tmp_path / "runs"), "--run-id", "r", "-q", cwd=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    assert "--tenants: task safety added" in res.stdout and "--tenants: needle at 512 tokens added" in res.stdout
    store = Store.open(tmp_path / "runs" / "r")
    base = store.samples("bf16")
    assert {r.task for r in base} == {"needle", "safety"}
    assert max(r.metadata["context_len"] for r in base if r.task == "needle") == 512  # the tenant's context, drawn

    # by hand: verdicts from the gate under each tenant's policy; bytes as the run measured them
    policies = {n: parse_policy(t["policy"]) for n, t in TENANTS.items()}
    gated = gate_store(store, None, also=list(policies.values()))
    verdict = {n: gated.under(p).variant_verdicts for n, p in policies.items()}
    w = {v: i.weight_bytes for v, i in store.variant_infos().items()}
    kv4 = "kv4g32r128"

    code, out, _ = (r := _cli("tenants", "r", "--json", cwd=tmp_path / "runs")).returncode, r.stdout, r.stderr
    got = {d["tenant"]: d for d in json.loads(out)["decisions"]}

    chat = got["chat"]  # vLLM: not evalsuite's KV; w4g64 (an emulation) if its policy takes it, else bf16
    assert {(x["variant"], x["stage"]) for x in chat["rejected"] if x["stage"] == "runtime"} == {(kv4, "runtime")}
    want = "w4g64" if accepted(verdict["chat"]["w4g64"], LENIENT) else "bf16"
    assert chat["variant"] == want != kv4
    if want == "w4g64":
        assert chat["requests_per_gpu"] == math.floor((2 * GIB - w["w4g64"]) / kv_request("w4g64", 256))
        assert any("gate the artifact (`ckpt:`) before shipping" in n for n in chat["notes"])

    docs = got["long-docs"]  # 100 x 512 tokens on 1 GiB: bf16 and w4g64 hold fewer, kv4g32 more
    fits = {v: math.floor((GIB - w[v]) / kv_request(v, 512)) >= 100 for v in ("bf16", "w4g64", kv4)}
    assert fits == {"bf16": False, "w4g64": False, kv4: True}
    assert accepted(verdict["long-docs"]["w4g64"], LENIENT)  # quality would take w4g64: the fit decides
    rejected = {x["variant"]: x for x in docs["rejected"]}
    assert rejected["w4g64"]["stage"] == "fit" and "100 requests at 512 tokens need 2 GPUs" in rejected["w4g64"]["why"]
    if accepted(verdict["long-docs"][kv4], LENIENT):
        assert (docs["variant"], docs["status"]) == (kv4, "chosen")
        assert docs["requests_per_gpu"] == math.floor((GIB - w["bf16"]) / kv_request(kv4, 512))
    else:
        assert docs["status"] == "nothing" and "the baseline does not fit" in docs["why_none"]

    strict = got["strict-safety"]  # n=8 < min_samples 10 on the harmful slice: nothing PASSes, so the baseline
    open_ = [v for v in ("w4g64", kv4) if verdict["strict-safety"][v] == "INCONCLUSIVE"]
    assert strict["variant"] == "bf16" and strict["status"] == ("undecided" if open_ else "baseline")
    assert {x["variant"]: x["stage"] for x in strict["rejected"]} == {"w4g64": "quality", kv4: "quality"}
    assert code == (0 if all(d["status"] in ("chosen", "baseline") for d in got.values()) else 1)

    tiny = tmp_path / "tiny.yaml"  # 100 MB: not even w4g64's weights and one request
    tiny.write_text(yaml.safe_dump({"tenants": {"tiny": {**TENANTS["chat"], "gpu_memory": "100MB"}}}))
    r = _cli("tenants", "r", "--tenants", str(tiny), cwd=tmp_path / "runs")
    assert r.returncode == 1
    assert (f"tiny: nothing serves this tenant: variants ruled out by runtime 1, fit 1; the baseline does not fit: "
            f"weights {w['bf16'] / 2**20:.2f} MiB") in r.stdout
    report = json.loads(next((tmp_path / "reports").rglob("results.json")).read_text())
    assert [d["tenant"] for d in report["tenants"]["decisions"]] == list(TENANTS)
