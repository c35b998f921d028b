"""Per-tenant fallback: the cheapest variant that passes each tenant's policy, else the baseline.

``tenants.yaml``::

    tenants:
      free-tier:
        cost: weight_bytes            # or kv_bytes_per_token
        policy: {defaults: {max_drop: 0.10}}
      enterprise:
        preference: [w8-kv8, w8]      # cheapest first; only these are considered
        policy: strict.yaml           # a path, relative to tenants.yaml
      internal: {}                    # shipped default policy, cost weight_bytes

Ranking: ``weight_bytes`` sorts by (weight bytes, KV bytes/token, name); ``kv_bytes_per_token`` by (KV
bytes/token, weight bytes, name); an unknown KV size sorts last. A variant is accepted when its verdict
is PASS, or INCONCLUSIVE under a policy with ``on_inconclusive: pass``. When the baseline's VariantInfo
is given, variants that are not cheaper than it are never chosen.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from evalsuite.errors import EvalsuiteError
from evalsuite.gate.policy import Policy, PolicyParser, load_policy, parse_policy
from evalsuite.gate.verdict import evaluate_gate
from evalsuite.core.records import KLDResult, SampleResult, VariantInfo
from evalsuite.stats.compare import SliceFilter, compare
from evalsuite.gate.types import CheckResult, GateResult, Verdict
from evalsuite.stats.types import PairedStats

COSTS = ("weight_bytes", "kv_bytes_per_token")


@dataclass(frozen=True)
class Tenant:
    """One tenant: its policy and its cost objective (``preference`` when an explicit order is given)."""

    name: str
    policy: Policy
    cost: str = "weight_bytes"
    preference: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rejection:
    """A cheaper variant that was not chosen, and why (one line per reason)."""

    variant: str
    verdict: Verdict | None  # None: rejected before gating (unknown cost, not in the run, not cheaper)
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class TenantDecision:
    """The variant a tenant gets and the cheaper ones it does not."""

    tenant: str
    chosen: str
    fallback: bool  # True when no variant passed and the baseline was chosen
    cost: str
    verdict: Verdict | None  # the chosen variant's verdict (None for the baseline)
    rejected: tuple[Rejection, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rank_key(info: VariantInfo, cost: str) -> tuple[float, float]:
    kv = info.kv_bytes_per_token if info.kv_bytes_per_token is not None else math.inf
    return (info.weight_bytes, kv) if cost == "weight_bytes" else (kv, info.weight_bytes)


def _candidates(tenant: Tenant, variants: Sequence[str], infos: Mapping[str, VariantInfo],
                baseline: str) -> tuple[list[str], list[Rejection]]:
    """Variants in the order to try them, and those rejected before gating."""
    rejected: list[Rejection] = []
    if tenant.cost == "preference":
        order = [v for v in tenant.preference if v != baseline]
        rejected += [Rejection(v, None, (f"{v}: not in this run",)) for v in order if v not in variants]
        return [v for v in order if v in variants], rejected
    known = [v for v in variants if v in infos and v != baseline]
    rejected += [Rejection(v, None, (f"{v}: no VariantInfo, cost unknown",)) for v in variants
                 if v not in infos and v != baseline]
    order = sorted(known, key=lambda v: (_rank_key(infos[v], tenant.cost), v))
    if baseline in infos:
        limit = _rank_key(infos[baseline], tenant.cost)
        rejected += [Rejection(v, None, (f"{v}: {tenant.cost} not cheaper than {baseline}",))
                     for v in order if _rank_key(infos[v], tenant.cost) >= limit]
        order = [v for v in order if _rank_key(infos[v], tenant.cost) < limit]
    return order, rejected


def _why(variant: str, gate: GateResult) -> tuple[str, ...]:
    """The variant's FAIL checks, then its INCONCLUSIVE ones (one line each)."""
    mine: list[CheckResult] = [c for c in gate.checks if c.variant == variant]
    return tuple(c.reason for v in ("FAIL", "INCONCLUSIVE") for c in mine if c.verdict == v)


def decide_tenants(stats: Sequence[PairedStats], variant_infos: Mapping[str, VariantInfo],
                   tenants: Sequence[Tenant], baseline: str = "bf16") -> list[TenantDecision]:
    """Per tenant, the cheapest variant accepted by its policy, else ``baseline``."""
    variants = [v for v in dict.fromkeys(s.variant for s in stats) if v != baseline]
    decisions = []
    for tenant in tenants:
        order, rejected = _candidates(tenant, variants, variant_infos, baseline)
        gate = evaluate_gate(stats, tenant.policy, order)
        chosen, verdict = baseline, None
        for v in order:
            verdict_v = gate.variant_verdicts[v]
            if verdict_v == "PASS" or (verdict_v == "INCONCLUSIVE" and tenant.policy.on_inconclusive == "pass"):
                chosen, verdict = v, verdict_v
                break
            rejected.append(Rejection(v, verdict_v, _why(v, gate)))
        decisions.append(TenantDecision(tenant.name, chosen, chosen == baseline, tenant.cost, verdict,
                                        tuple(rejected)))
    return decisions


def tenant_filters(tenants: Sequence[Tenant]) -> list[SliceFilter]:
    """The selector slices of every tenant's policy (deduplicated by task and name)."""
    seen: dict[tuple[str | None, str], SliceFilter] = {}
    for t in tenants:
        for f in t.policy.filters():
            seen.setdefault((f.task, f.name), f)
    return list(seen.values())


def tenants_run(baseline: Sequence[SampleResult], variants: Mapping[str, Sequence[SampleResult]],
                kld: Mapping[str, Sequence[KLDResult]], variant_infos: Mapping[str, VariantInfo],
                tenants: Sequence[Tenant], binary_tasks: Set[str] | None = None, baseline_name: str = "bf16",
                *, n_boot: int = 2000, seed: int = 0) -> tuple[list[PairedStats], list[TenantDecision]]:
    """Stats covering every tenant's selector slices, and the decision per tenant."""
    stats: list[PairedStats] = []
    for name, records in variants.items():
        stats += compare(baseline, records, kld.get(name, ()), None, binary_tasks, filters=tenant_filters(tenants),
                         variant_name=name, n_boot=n_boot, seed=seed)
    return stats, decide_tenants(stats, variant_infos, tenants, baseline_name)


def _tenant(p: PolicyParser, name: str, data: Any, base_dir: Path) -> Tenant:
    where = f"tenants.{name}"
    data = p.check_keys(where, data, ["policy", "cost", "preference", "description"])
    if "cost" in data and "preference" in data:
        raise p.fail(where, "set either cost or preference, not both")
    cost = data.get("cost", "weight_bytes")
    if "preference" not in data and cost not in COSTS:
        raise p.fail(f"{where}.cost", f"must be one of {', '.join(COSTS)}, got {cost!r}")
    pref = data.get("preference")
    if "preference" in data and (not isinstance(pref, list) or not pref or not all(isinstance(v, str) for v in pref)):
        raise p.fail(f"{where}.preference", "expected a non-empty list of variant names, cheapest first")
    pol = data.get("policy")
    if pol is None:
        policy = load_policy(None)
    elif isinstance(pol, str):
        policy = load_policy(base_dir / pol)
    else:
        policy = parse_policy(pol, f"{p.source}:{where}.policy")
    return Tenant(name, policy, "preference" if pref else cost, tuple(pref or ()))


def parse_tenants(data: Any, source: str = "<inline>", base_dir: Path | str = ".") -> list[Tenant]:
    """Tenants from already-loaded YAML data; policy paths resolve against ``base_dir``."""
    p = PolicyParser(source, "tenants")
    data = p.check_keys("top level", data, ["tenants", "description"])
    tenants = p.check_keys("tenants", data.get("tenants"), None)
    if not tenants:
        raise p.fail("tenants", "required: a mapping of tenant name -> {policy, cost | preference}")
    return [_tenant(p, str(name), cfg, Path(base_dir)) for name, cfg in tenants.items()]


def load_tenants(path: str | Path) -> list[Tenant]:
    """Parse a tenants.yaml file."""
    path = Path(path)
    if not path.is_file():
        raise EvalsuiteError(f"tenants file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise EvalsuiteError(f"tenants {path}: not valid YAML ({' '.join(str(exc).split())})") from None
    return parse_tenants(data, str(path), path.parent)
