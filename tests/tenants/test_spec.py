"""tenants.yaml: the workload keys, one-line errors (the old cost:/preference: form says how to migrate), a tenant's
policy inheriting exactly what a --policy file inherits, what a run stores, and what --tenants adds to a run."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from evalsuite.errors import EvalsuiteError
from evalsuite.gate.policy import load_policy
from evalsuite.tenants.run import with_tenants
from evalsuite.tenants.spec import from_stored, load_tenants, parse_tenants, stored

GIB = 2**30
CHAT = {"context": {"typical": 1024, "max": 4096}, "concurrency": 64, "gpu_memory": "80GiB", "runtime": "vllm",
        "objective": "requests_per_gpu"}


def test_workload_keys_and_defaults():
    (t,) = parse_tenants({"tenants": {"chat": {**CHAT, "gpus": 2, "reserve": "6GiB", "decode_speedup": 1.5,
                                               "gpu": "H100"}}})
    w = t.workload
    assert (w.context, w.max_context, w.concurrency, w.gpu_mem, w.gpus, w.reserve) == \
        (1024, 4096, 64, 80 * GIB, 2, 6 * GIB)
    assert (t.runtime, t.objective, t.decode_speedup, t.gpu) == ("vllm", "requests_per_gpu", 1.5, "H100")
    (d,) = parse_tenants({"tenants": {"d": {"context": 512, "concurrency": 1, "gpu_memory": "24GB",
                                            "runtime": "any"}}})
    assert (d.workload.max_context, d.workload.reserve, d.workload.gpus, d.objective) == (512, 24 * 10**8, 1, "gpus")
    assert d.policy == load_policy(None)  # no policy: the shipped one


@pytest.mark.parametrize("entry, match", [
    ({"cost": "weight_bytes"}, r"tenants.a: the cost:/preference: form .* is gone: a tenant is a workload now; give "
                               r"context, concurrency, gpu_memory, runtime and objective \(docs/tenants.md\)"),
    ({"preference": ["w4"]}, "the cost:/preference: form"),
    ({**CHAT, "runtime": "vlm"}, r"tenants.a.runtime: must be .* got 'vlm' \(did you mean 'vllm'\?\)"),
    ({**CHAT, "objective": "cheapest"}, "tenants.a.objective: must be 'gpus' or 'requests_per_gpu' or"),
    ({k: v for k, v in CHAT.items() if k != "concurrency"}, "tenants.a: concurrency is required"),
    ({**CHAT, "context": {"typical": 4096, "max": 1024}}, "tenants.a.context.max: 1024 is below"),
    ({**CHAT, "context": 0}, r"tenants.a.context: must be an integer >= 1"),
    ({**CHAT, "gpu_memory": "80XB"}, r"tenants.a.gpu_memory: bad size '80XB'"),
    ({**CHAT, "reserve": "90GiB"}, r"tenants.a.reserve: reserve 90GiB leaves nothing"),
    ({**CHAT, "decode_speedup": "fast"}, "tenants.a.decode_speedup: must be a number > 0"),
    ({**CHAT, "concurency": 3}, r"unknown key 'concurency' \(did you mean 'concurrency'\?\)"),
    ({**CHAT, "policy": {"defaults": {"max_drop": 9}}}, r"tenants.a.policy: defaults.max_drop"),
])
def test_bad_entries_are_one_line_errors(entry, match):
    with pytest.raises(EvalsuiteError, match=match) as err:
        parse_tenants({"tenants": {"a": entry}}, "t.yaml")
    assert "\n" not in str(err.value)


def test_a_tenant_policy_inherits_exactly_what_a_policy_file_inherits(tmp_path: Path):
    """Inline or by path, a tenant's policy is the --policy file of the same text: the shipped defaults for keys
    it does not set, none of the shipped tasks (reasoning at 0.05, not the shipped 0.10)."""
    doc = {"defaults": {"on_inconclusive": "fail"}, "tasks": {"safety": {"max_drop": 0.0}}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    as_file = load_policy(tmp_path / "p.yaml")
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"tenants": {"inline": {**CHAT, "policy": doc},
                                                                 "path": {**CHAT, "policy": "p.yaml"}}}))
    inline, by_path = load_tenants(tmp_path / "t.yaml")
    for t in (inline, by_path):
        assert replace(t.policy, source="x") == replace(as_file, source="x")
    shipped = load_policy(None)
    assert inline.policy.defaults == shipped.defaults and inline.policy.thresholds("reasoning").max_drop == 0.05
    assert shipped.thresholds("reasoning").max_drop == 0.10 and "needle" not in inline.policy.tasks


def test_what_a_run_stores_reads_back_the_same(tmp_path: Path):
    (tmp_path / "strict.yaml").write_text("defaults: {max_drop: 0.02}\n")
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"tenants": {
        "a": {**CHAT, "policy": "strict.yaml"}, "b": {**CHAT, "runtime": "any"}, "c": {**CHAT, "policy": None}}}))
    tenants = load_tenants(tmp_path / "t.yaml")
    (tmp_path / "strict.yaml").unlink()  # the stored form needs the policy file no more
    back = from_stored(yaml.safe_load(yaml.safe_dump(stored(tenants, str(tmp_path / "t.yaml")))))
    assert [(t.name, t.workload, t.runtime, t.policy.defaults, t.policy.tasks) for t in back] == \
        [(t.name, t.workload, t.runtime, t.policy.defaults, t.policy.tasks) for t in tenants]


def test_missing_or_broken_file(tmp_path: Path):
    with pytest.raises(EvalsuiteError, match="tenants file not found"):
        load_tenants(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("tenants: [")
    with pytest.raises(EvalsuiteError, match="not valid YAML"):
        load_tenants(tmp_path / "bad.yaml")


def test_tenants_add_their_tasks_and_needle_contexts():
    safety = {**CHAT, "context": 256, "policy": {"tasks": {"safety": {"max_drop": 0.0}}}}
    long_docs = {**CHAT, "context": {"typical": 512, "max": 2048}}
    tenants = parse_tenants({"tenants": {"s": safety, "l": long_docs}})
    tasks, params, said = with_tenants(["needle"], {"needle": {"context_lens": [256]}}, tenants, [512, 1024])
    assert tasks == ["needle", "safety"] and params["needle"]["context_lens"] == [256, 512, 2048]
    assert said == ["--tenants: task safety added (a tenant's policy gates it)",
                    "--tenants: needle at 512, 2,048 tokens added (tenants' contexts)"]
    tasks, params, _ = with_tenants(["json"], {}, tenants, [512, 1024])  # no needle: no contexts to add
    assert tasks == ["json", "safety"] and params == {}
    _, params, _ = with_tenants(["needle"], {}, tenants, [512, 1024])  # the task's defaults, and the tenants'
    assert params["needle"]["context_lens"] == [256, 512, 1024, 2048]
