"""The run's decision function with tenants: the run gated under each tenant's policy too, a check any policy leaves
open stays open (so a sequential run draws for it), a variant stops only when every policy FAILs it."""
from __future__ import annotations

from evalsuite.core.config import RunConfig
from evalsuite.core.decision import Decision
from evalsuite.store.records import SampleResult
from evalsuite.store.sqlite import Store
from evalsuite.gate.decide import joint, store_decider
from evalsuite.gate.policy import load_policy


def test_joint_keeps_what_any_policy_leaves_open():
    run = Decision({"a": "FAIL", "b": "PASS", "c": "FAIL"}, {}, {}, {})
    tenant = Decision({"a": "INCONCLUSIVE", "b": "INCONCLUSIVE", "c": "FAIL"},
                      {"a": {"json": 40}, "b": {"json": 0, "code": 12}}, {"a": {"json": 40}}, {})
    other = Decision({"a": "FAIL", "b": "INCONCLUSIVE", "c": "FAIL"}, {"b": {"json": 25, "code": 30}}, {}, {})
    j = joint([run, tenant, other])
    assert j.verdicts == {"a": "INCONCLUSIVE", "b": "INCONCLUSIVE", "c": "FAIL"}
    assert j.open == {"a": {"json": 40}, "b": {"json": 25, "code": 12}}  # the least estimate; 0 is "none"
    assert j.failing == {"a": {"json": 40}} and j.failed == {"c"}
    assert joint([run]) is run


def test_store_decider_opens_a_tenants_checks(tmp_path):
    store = Store.create(tmp_path / "r", RunConfig(model="tiny", variants=["bf16", "v"], tasks=["copy"]).to_dict())
    store.put_samples(SampleResult(v, "copy", "1", f"s{i}", f"h{i}", "", float(i % 2)) for v in ("bf16", "v")
                      for i in range(4))
    lenient = tmp_path / "lenient.yaml"  # decides at n=4: nothing left open
    lenient.write_text("defaults: {min_samples: 1, max_drop: 1.0, max_flip_rate: 1.0}\n")
    alone = store_decider(lenient)(store)
    assert alone.verdicts == {"v": "PASS"} and alone.open == {}
    shipped = load_policy(None)  # min_samples 10: a tenant under the shipped policy still needs pairs
    both = store_decider(lenient, [shipped])(store)
    assert both.verdicts == {"v": "INCONCLUSIVE"} and both.open == {"v": {"copy": 6}}
