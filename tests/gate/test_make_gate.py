"""`make gate`'s defaults: the mission's 2x2 grid on all four task families, variant names that parse, and needle
contexts well past every KV variant's full-precision residual (so a KV PASS covers tokens the cache quantizes)."""
from __future__ import annotations

import re
from pathlib import Path

from evalsuite.gate.policy import load_policy

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = ROOT / "Makefile"


def _default(name: str) -> str:
    (value,) = re.findall(rf"^{name} \?=(.*)$", MAKEFILE.read_text(), flags=re.M)
    return value.strip()


def test_make_gate_gates_the_grid_on_every_task_family():
    from evalsuite.tasks.needle import NeedleTask
    from evalsuite.tasks.registry import default_registry
    from evalsuite.variants.spec import parse_variant_list

    specs = parse_variant_list(_default("GATE_VARIANTS"))
    assert [s.name for s in specs] == ["w4g64", "kv4g32r128", "w4g64+kv4g32r128"]
    tasks = _default("GATE_TASKS").split(",")
    assert sorted(tasks) == ["code", "json", "needle", "reasoning"]
    assert tasks[0] == "reasoning" and tasks[-1] == "needle"  # round 1 goes in this order: the cheapest pairs first
    registry = default_registry()
    for task in _default("GATE_TASKS").split(","):
        registry.get(task)  # raises on an unknown task
    shortest = min(NeedleTask().params({})["context_lens"])
    for s in specs:
        if s.kv is not None:
            assert shortest >= 4 * s.kv.residual, s.name  # 512 >= 4 x 128
    assert _default("GATE_MAX_SAMPLES") == "" and _default("GATE_BUDGET") == "9m"  # the budget ends the run
    recipe = MAKEFILE.read_text().split("\ngate: setup\n")[1].split("\n\n")[0]
    assert "--store-baseline $(GATE_BASELINES)" in recipe and "w4g32" not in recipe and "w2g32" not in recipe
    assert _default("GATE_ACCUMULATE") == "--accumulate" and "$(GATE_ACCUMULATE)" in recipe  # evidence grows
    selftest = MAKEFILE.read_text().split("\nselftest: setup\n")[1].split("\n\n")[0]
    assert "--variants w4g32,w2g32" in selftest and "'w4g32': 'PASS', 'w2g32': 'FAIL'" in selftest
    assert selftest.count("$(SELFTEST_POLICY)") == 2  # the run and the check gate with it: max_kld gated
    policy = load_policy(ROOT / _default("SELFTEST_POLICY"))
    assert policy.defaults.max_kld == 0.5 and load_policy().defaults.max_kld is None
