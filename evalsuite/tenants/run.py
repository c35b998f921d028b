"""Tenants and a run: what ``evalsuite run --tenants`` adds to what the run draws, and the decisions on a stored run
(its gate under each tenant's policy, its variants' forms and measured bytes, the model's shape)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalsuite.store.sqlite import Store
from evalsuite.gate.store_gate import GatedRun, gate_store
from evalsuite.capacity.shape import ModelShape, count_params, shape_from_config
from evalsuite.tenants.decide import RunFacts, TenantDecision, decide_all, exit_code
from evalsuite.tenants.forms import form_of
from evalsuite.tenants.spec import Tenant

NEEDLE, MIN_NEEDLE = "needle", 128  #: the needle task, and its shortest context (``tasks.needle``)
BYTES_SLACK = 0.02  #: a config.json whose bf16 bytes are this far from the baseline's measured ones is another model


def tenant_tasks(tenants: Sequence[Tenant]) -> list[str]:
    """Every task a tenant's policy requires (a strict tenant's ``safety``; not its ``optional`` ones), in order."""
    return list(dict.fromkeys(t for tenant in tenants for t, tp in tenant.policy.tasks.items() if not tp.optional))


def needle_contexts(tenants: Sequence[Tenant]) -> list[int]:
    """The tenants' typical and longest prompt contexts (the needle task's shortest and up)."""
    lens = {n for t in tenants for n in (t.workload.context, t.workload.max_context)}
    return sorted(n for n in lens if n >= MIN_NEEDLE)


def with_tenants(tasks: Sequence[str], params: Mapping[str, dict[str, Any]], tenants: Sequence[Tenant],
                 needle_lens: Sequence[int]) -> tuple[list[str], dict[str, dict[str, Any]], list[str]]:
    """The run's tasks and parameters with each tenant's slices added: the tasks their policies name, and the needle
    at their context lengths (beside ``needle_lens``, the needle's own). Also, one line per addition."""
    out_tasks, out_params, said = list(tasks), {k: dict(v) for k, v in params.items()}, []
    for t in tenant_tasks(tenants):
        if t not in out_tasks:
            out_tasks.append(t)
            said.append(f"--tenants: task {t} added (a tenant's policy gates it)")
    if NEEDLE in out_tasks:
        lens = list(out_params.get(NEEDLE, {}).get("context_lens") or needle_lens)
        extra = [n for n in needle_contexts(tenants) if n not in lens]
        if extra:
            out_params.setdefault(NEEDLE, {})["context_lens"] = sorted(lens + extra)
            said.append(f"--tenants: needle at {', '.join(f'{n:,}' for n in extra)} tokens added (tenants' contexts)")
    return out_tasks, out_params, said


def longest_needle(store: Store, baseline: str) -> int | None:
    """The longest needle context the run drew (None: no needle)."""
    lens = [int(r.metadata["context_len"]) for r in store.samples(baseline)
            if r.task == NEEDLE and isinstance(r.metadata.get("context_len"), (int, float))]
    return max(lens, default=None)


def same_model(shape: ModelShape, gated: GatedRun, store: Store) -> bool:
    """Whether ``shape`` is the run's model: its bf16 bytes within ``BYTES_SLACK`` of the baseline's measured ones
    (True when the run measured none)."""
    info = store.variant_infos().get(gated.baseline)
    if info is None or not info.weight_bytes:
        return True
    return abs(2 * count_params(shape).total - info.weight_bytes) <= BYTES_SLACK * info.weight_bytes


def decide_store(store: Store, tenants: Sequence[Tenant], config: Mapping[str, Any],
                 gated: GatedRun | None = None) -> tuple[list[TenantDecision], dict[str, Any]]:
    """Each tenant's decision on a finished run whose model's ``config.json`` is ``config``, and the report's tenants
    section (``report.model``). ``gated``: the run gated with the tenants' policies in ``also``, when the caller has
    it."""
    gated = gated or gate_store(store, None, also=[t.policy for t in tenants])
    shape = shape_from_config(dict(config))
    infos = store.variant_infos()
    measured = same_model(shape, gated, store)
    names = [gated.baseline, *gated.variants]
    forms = {v: form_of(v, infos[v].spec if v in infos else None) for v in names}
    facts = RunFacts(gated.baseline, gated.variants, forms, shape, infos, measured,
                     longest_needle(store, gated.baseline))
    decisions = decide_all(tenants, gated.under, facts)
    params = count_params(shape).total
    model = (f"{shape.model_type}, {params / 1e9:.3g}B params, {shape.layers} layers, {shape.kv_heads} KV heads × "
             f"{shape.head_dim}; " + ("weights as the run measured them" if measured else
                                      "weights from the planner's formula (not the run's model: its bytes differ)"))
    return decisions, {"exit_code": exit_code(decisions), "model": model,
                       "decisions": [d.to_dict() for d in decisions]}
