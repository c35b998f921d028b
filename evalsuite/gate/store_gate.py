"""Gate a stored run: store -> paired stats -> verdicts (no model needed)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evalsuite.gate.policy import Policy, load_policy
from evalsuite.gate.verdict import evaluate_gate, gate_run
from evalsuite.core.records import NOISE_SUFFIX
from evalsuite.core.store import Store
from evalsuite.stats.compare import noise_floor
from evalsuite.gate.types import GateResult
from evalsuite.stats.types import PairedStats


@dataclass
class GatedRun:
    """Everything the report and the CLI need from one gated run."""

    baseline: str
    variants: list[str]
    stats: list[PairedStats]
    gate: GateResult
    noise: list[PairedStats] | None
    policy: Policy
    expected: list[str] = field(default_factory=list)  # the tasks the run was asked for

    def under(self, policy: Policy) -> GateResult:
        """The same run gated under another policy (a tenant's): ``evaluate_gate`` on these stats, which hold that
        policy's selector slices when ``gate_store`` was given it in ``also``."""
        return evaluate_gate(self.stats, policy, self.variants, self.expected)


def gate_store(store: Store, policy_path: Path | None = None, also: Sequence[Policy] = ()) -> GatedRun:
    """Compare every stored variant with the stored baseline and gate it against the policy; the stats also hold
    the selector slices of the policies in ``also`` (tenants' policies, ``GatedRun.under``)."""
    policy = load_policy(policy_path)
    state = store.state()
    baseline = state.baseline
    order = state.variant_order or store.variants_present()
    present = set(store.variants_present())
    # every variant the run was asked for: one without samples (a budget spent before it ran) is INCONCLUSIVE
    # ("no paired samples"), never silently left out of the verdict
    variants = [v for v in order if v != baseline and not v.endswith(NOISE_SUFFIX)]
    base_rows = store.samples(baseline)
    records = {v: store.samples(v) for v in variants}
    kld = {v: store.kld(v) for v in variants}
    expected = list((state.config or {}).get("tasks") or [])
    stats, gate = gate_run(base_rows, records, kld, policy, expected_tasks=expected, also=also)
    noise = None
    noise_name = baseline + NOISE_SUFFIX
    if noise_name in present:
        noise = noise_floor(base_rows, store.samples(noise_name), kld=store.kld(noise_name))
    return GatedRun(baseline, variants, stats, gate, noise, policy, expected)
