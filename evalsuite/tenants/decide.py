"""The decision per tenant: of the run's variants, those its runtime serves (``runtimes``), that fit its GPUs at its
context and concurrency (``capacity.serve``, on the run's model shape with each variant's measured bytes), that meet
its decode target, and that its policy accepts (the gate's own verdict under that policy: PASS, or INCONCLUSIVE
under ``on_inconclusive: pass``): the best by its objective. None: the baseline if it fits, else nothing serves it.

Each variant not chosen gets one line: the first check it failed in that order (runtime, fit, speed, quality), or,
having passed them all, how it lost on the objective. A quality line is the deciding check (a FAIL), or the open
check nearest a decision (least ``more_needed``). A baseline fallback while a variant that serves and fits is only
INCONCLUSIVE under ``on_inconclusive: fail`` is ``undecided``: more samples could decide it (exit 1).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

from evalsuite.store.records import VariantInfo
from evalsuite.gate.policy import Policy
from evalsuite.gate.types import RANK, CheckResult, GateResult
from evalsuite.capacity.bytes import kv_dims
from evalsuite.capacity.serve import Footprint, Serving, footprint, gpus, serve, shortfall, speedup
from evalsuite.capacity.shape import ModelShape
from evalsuite.tenants.forms import BYTES_PER_VALUE, Form
from evalsuite.tenants.runtimes import serves
from evalsuite.tenants.spec import Tenant

DECIDED = ("chosen", "baseline")  #: statuses that exit 0


@dataclass(frozen=True)
class RunFacts:
    """What a decision reads of a run besides the gate."""

    baseline: str
    variants: Sequence[str]
    forms: Mapping[str, Form]
    shape: ModelShape
    infos: Mapping[str, VariantInfo] = field(default_factory=dict)
    measured: bool = True  # ``infos``' bytes are of ``shape``'s model (the run's own): use them
    longest_needle: int | None = None  # the longest needle context the run drew (None: no needle)


@dataclass(frozen=True)
class Rejection:
    """A variant a tenant does not get: the stage that ruled it out (runtime, fit, speed, quality, objective)."""

    variant: str
    stage: str
    why: str
    verdict: str | None = None


@dataclass(frozen=True)
class TenantDecision:
    """What serves one tenant. ``status``: chosen, baseline (nothing cheaper passes and fits), undecided (the baseline
    while a variant is only INCONCLUSIVE under ``on_inconclusive: fail``), nothing (not even the baseline fits)."""

    tenant: str
    runtime: str
    objective: str
    status: str
    variant: str | None
    verdict: str | None  # the chosen variant's verdict under the tenant's policy; "baseline" for the baseline
    requests_per_gpu: float | None = None
    gpus_needed: int | None = None
    decode_speedup: float | None = None
    speed_source: str | None = None  # predicted | measured on vLLM
    notes: tuple[str, ...] = ()
    rejected: tuple[Rejection, ...] = ()
    why_none: str = ""
    workload: dict[str, Any] = field(default_factory=dict)
    bytes_source: str = "measured"

    @property
    def decided(self) -> bool:
        return self.status in DECIDED

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "decided": self.decided}


@dataclass(frozen=True)
class Candidate:
    """A variant that serves and fits, with its figures."""

    variant: str
    verdict: str
    serving: Serving
    speed: float
    source: str
    note: str = ""


def _size(name: str, form: Form, tenant: Tenant, facts: RunFacts) -> Footprint | None:
    """The variant's footprint under the tenant's workload, or None where its bytes are unknown."""
    info = facts.infos.get(name) if facts.measured else None
    weights = info.weight_bytes if info is not None and info.weight_bytes else None  # 0 / None: not measured
    if weights is None and form.weight_spec is None and form.weights != "bf16":
        return None
    per_token = None
    if form.kv.startswith("vllm-"):
        per_token = info.kv_bytes_per_token if info is not None else None
        if per_token is None and form.kv_dtype in BYTES_PER_VALUE:
            per_token = kv_dims(facts.shape).values_per_token * BYTES_PER_VALUE[form.kv_dtype]
        if per_token is None:
            return None
    elif form.kv == "unknown":
        return None
    return footprint(facts.shape, form.weight_spec, form.kv_config, tenant.workload, weight_bytes=weights,
                     kv_per_token=per_token)


def _speed(name: str, tenant: Tenant, facts: RunFacts, fit: Serving, base: Serving) -> tuple[float, str]:
    """Decode speed-up over the baseline: measured where the run served both on the tenant's runtime (vLLM)."""
    info, b = facts.infos.get(name), facts.infos.get(facts.baseline)
    if (tenant.runtime == "vllm" and facts.forms[name].engine == "vllm" and info and b and info.itl_s
            and b.itl_s and facts.forms.get(facts.baseline, facts.forms[name]).engine == "vllm"):
        return b.itl_s / info.itl_s, "measured on vLLM"
    return speedup(fit, base), "predicted"


def quality_line(gate: GateResult, variant: str, on_inconclusive: str) -> str:
    """The deciding check of a variant the policy refuses (a FAIL), or its open check nearest a decision."""
    mine = [c for c in gate.checks if c.variant == variant]
    if gate.variant_verdicts.get(variant) == "FAIL":
        fails = [c for c in mine if c.verdict == "FAIL"]
        return f"FAIL {fails[0].reason}" if fails else "FAIL"
    open_ = sorted((c for c in mine if c.verdict == "INCONCLUSIVE"),
                   key=lambda c: (c.more_needed is None, c.more_needed or 0))
    head = f"INCONCLUSIVE under on_inconclusive: {on_inconclusive}"
    return f"{head}; nearest: {open_[0].reason}" if open_ else head


def worst_delta(gate: GateResult, variant: str) -> CheckResult | None:
    """The variant's max_drop check with the lowest observed Δ."""
    drops = [c for c in gate.checks if c.variant == variant and c.check == "max_drop"]
    return min(drops, key=lambda c: c.observed, default=None)


def _objective(tenant: Tenant, c: Candidate) -> tuple[float, ...]:
    s, rank = c.serving, RANK.get(c.verdict, 0)
    keys = {"gpus": (s.gpus_needed, rank, -s.requests_per_gpu, -c.speed),
            "requests_per_gpu": (-s.requests_per_gpu, rank, s.gpus_needed, -c.speed),
            "decode_speed": (-c.speed, rank, s.gpus_needed, -s.requests_per_gpu)}
    return keys[tenant.objective]


def _figures(c: Candidate) -> str:
    return f"{gpus(c.serving.gpus_needed)}, {c.serving.requests_per_gpu:.1f} req/GPU, decode {c.speed:.2f}× {c.source}"


def _screen(tenant: Tenant, gate: GateResult, facts: RunFacts,
            base: Serving) -> tuple[list[Candidate], list[Rejection], bool]:
    """Candidates, rejections, and whether one that serves and fits is refused only as INCONCLUSIVE."""
    work, cands, out, pending = tenant.workload, [], [], False
    for v in facts.variants:
        form, verdict = facts.forms[v], gate.variant_verdicts.get(v)
        ok = serves(tenant.runtime, form, v)
        if not ok.ok:
            out.append(Rejection(v, "runtime", ok.why, verdict))
            continue
        fp = _size(v, form, tenant, facts)
        if fp is None:
            out.append(Rejection(v, "fit", "its bytes are unknown (no measured VariantInfo, no formula)", verdict))
            continue
        fit = serve(work, fp)
        if not fit.fits(work):
            out.append(Rejection(v, "fit", shortfall(work, fp, fit), verdict))
            continue
        speed, source = _speed(v, tenant, facts, fit, base)
        if tenant.decode_speedup is not None and speed < tenant.decode_speedup:
            out.append(Rejection(v, "speed", f"decode {speed:.2f}× ({source}) is below the target "
                                             f"{tenant.decode_speedup:g}×", verdict))
            continue
        if verdict != "PASS" and not (verdict == "INCONCLUSIVE" and tenant.policy.on_inconclusive == "pass"):
            pending = pending or verdict == "INCONCLUSIVE"
            out.append(Rejection(v, "quality", quality_line(gate, v, tenant.policy.on_inconclusive), verdict))
            continue
        cands.append(Candidate(v, str(verdict), fit, speed, source, ok.note))
    return cands, out, pending


def _notes(tenant: Tenant, gate: GateResult, facts: RunFacts, c: Candidate) -> tuple[str, ...]:
    notes = [c.note] if c.note else []
    if c.verdict == "INCONCLUSIVE":
        worst = worst_delta(gate, c.variant)
        where = f": worst Δ {worst.task}" + ("" if worst.slice == "all" else f"[{worst.slice}]") + \
            f" {worst.observed:+.3f}" if worst else ""
        notes.append(f"rests on INCONCLUSIVE evidence (on_inconclusive: pass){where}")
    if facts.forms[c.variant].kv != "bf16":
        top = tenant.workload.max_context
        if facts.longest_needle is None:
            notes.append("its quantized KV cache has no needle evidence in this run")
        elif facts.longest_needle < top:
            notes.append(f"needle evidence reaches {facts.longest_needle:,} tokens; this tenant's prompts reach "
                         f"{top:,}")
    return tuple(notes)


def decide_tenant(tenant: Tenant, gate: GateResult, facts: RunFacts) -> TenantDecision:
    """What serves ``tenant``, with ``gate`` the run gated under the tenant's policy."""
    work = tenant.workload
    base_fp = footprint(facts.shape, None, None, work, weight_bytes=(
        facts.infos[facts.baseline].weight_bytes if facts.measured and facts.baseline in facts.infos else None))
    base = serve(work, base_fp)
    cands, rejected, pending = _screen(tenant, gate, facts, base)
    common = {"tenant": tenant.name, "runtime": tenant.runtime, "objective": tenant.objective,
              "workload": work.to_dict() | {"gpu": tenant.gpu}, "bytes_source": "measured" if facts.measured
              else "formula"}
    if cands:
        ranked = sorted(cands, key=lambda c: (_objective(tenant, c), c.variant))
        best = ranked[0]
        rejected += [Rejection(c.variant, "objective", f"{_figures(c)}; {best.variant}: {_figures(best)}",
                               c.verdict) for c in ranked[1:]]
        return TenantDecision(**common, status="chosen", variant=best.variant, verdict=best.verdict,
                              requests_per_gpu=best.serving.requests_per_gpu, gpus_needed=best.serving.gpus_needed,
                              decode_speedup=best.speed, speed_source=best.source,
                              notes=_notes(tenant, gate, facts, best), rejected=tuple(rejected))
    if base.fits(work):
        notes = ("a variant is INCONCLUSIVE under on_inconclusive: fail: more samples could decide it",) \
            if pending else ()
        return TenantDecision(**common, status="undecided" if pending else "baseline", variant=facts.baseline,
                              verdict="baseline", requests_per_gpu=base.requests_per_gpu,
                              gpus_needed=base.gpus_needed, decode_speedup=1.0, speed_source="baseline",
                              notes=notes, rejected=tuple(rejected))
    stages = [r.stage for r in rejected]
    counts = ", ".join(f"{s} {stages.count(s)}" for s in ("runtime", "fit", "speed", "quality") if s in stages)
    why = (f"nothing serves this tenant: variants ruled out by {counts or 'nothing (the run has none)'}; the "
           f"baseline does not fit: {shortfall(work, base_fp, base)}")
    return TenantDecision(**common, status="nothing", variant=None, verdict=None, rejected=tuple(rejected),
                          why_none=why)


def decide_all(tenants: Sequence[Tenant], gate_under: Callable[[Policy], GateResult],
               facts: RunFacts) -> list[TenantDecision]:
    """Every tenant's decision; ``gate_under(policy)`` gates the run under a tenant's policy (``GatedRun.under``)."""
    return [decide_tenant(t, gate_under(t.policy), facts) for t in tenants]


def exit_code(decisions: Sequence[TenantDecision]) -> int:
    """0 when every tenant has a decided variant (a fitting baseline counts), else 1."""
    return 0 if all(d.decided for d in decisions) else 1
