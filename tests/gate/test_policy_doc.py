"""docs/policy.md's examples are policies the parser accepts, with the slices the page names, and what the page
says a policy file inherits from the shipped one holds."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from evalsuite.gate.policy import load_policy, parse_policy

PAGE = Path(__file__).resolve().parents[2] / "docs" / "policy.md"


def yaml_blocks() -> list[dict]:
    """The page's YAML blocks; a bare ``slices:`` fragment is read as one task's entry."""
    out = []
    for block in re.findall(r"```yaml\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S):
        data = yaml.safe_load(block)
        out.append({"tasks": {"needle": data}} if set(data) == {"slices"} else data)
    return out


def test_every_policy_example_on_the_page_parses():
    worked, fragment = yaml_blocks()
    policy = parse_policy(worked, "docs/policy.md")
    assert [r.name for r in policy.slices("needle")] == ["context_len>=2048", "kind=multi_key|multi_value"]
    assert policy.thresholds("code").max_kld is None and policy.thresholds("reasoning").max_drop == 0.10
    assert dict(policy.thresholds("json").metrics) == {("field_accuracy", "max_drop"): 0.05}
    names = [r.name for r in parse_policy(fragment).slices("needle")]
    assert names == ["context_len>=2048", "kind=multi_key|multi_value", "depth=0.5,kind=single", "difficulty!=easy"]


def test_a_policy_file_inherits_the_shipped_defaults_but_not_its_tasks():
    mine = parse_policy({"defaults": {"max_drop": 0.02}})
    shipped = load_policy(None)
    assert mine.defaults.max_kld == shipped.defaults.max_kld and mine.defaults.max_drop == 0.02
    assert shipped.slices("needle") and not mine.slices("needle")
    assert mine.thresholds("reasoning").max_drop == 0.02 != shipped.thresholds("reasoning").max_drop
