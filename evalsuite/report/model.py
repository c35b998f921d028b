"""The report model: a versioned, JSON-able dict that the HTML/Markdown/JUnit renderers read.

Shape (``schema_version`` 2)::

    {"schema_version": 2, "run_id": str, "created": str (ISO 8601),
     "model": {"name", "fingerprint", "dtype"}, "baseline": variant name,
     "overall": "PASS"|"FAIL"|"INCONCLUSIVE", "exit_code": int,
     "variants": [VariantInfo.to_dict() + {"verdict"}],
     "stats": [PairedStats.to_dict()],  # + "metrics": {name: {"baseline", "variant", "delta", "n"}}
     "checks": [CheckResult.to_dict()],  # + "n" (paired samples used), "more_needed" (int | None)
     "policy": Policy.to_dict() | None,
     "needle_grid": {variant: {"context_len": [..], "depth": [..], "score": [[per depth row, per context col]]}},
     "flips": [{"variant", "task", "sample_id", "prompt", "baseline_output", "variant_output",
                "baseline_score", "variant_score"}],
     "tasks": {name: version}, "noise_floor": [PairedStats.to_dict()] (optional),
     "seconds_per_pair": {"variant/task": seconds} (optional: a sequential run's measured cost of a pair),
     "baseline_cost": {task: {"drawn", "held", "seconds"}} (optional: the baseline's seconds per sample past the
                      ``held`` samples a stored baseline answers, ``report.build.baseline_cost``),
     "stopped": {variant: {task: why it stopped drawing}} (optional: a sequential run's ``meta.stopped``),
     "notes": [str] (optional: ``meta.notes``, e.g. how ``evalsuite compare`` paired logged samples),
     "guarantee": {variant: the false-FAIL guarantee in force, one line} (optional: ``GateResult.guarantee``),
     "machine": {"cpu", "flags", "cores", "gflops", "speed_class"} (optional: ``meta.machine``,
                ``cpu.machine.machine_info``),
     "tenants": {"exit_code", "model", "decisions": [TenantDecision.to_dict()]} (optional: a run with tenants,
                ``tenants.run.decide_store``)}

``score[i][j]`` is the mean score at ``depth[i]`` and ``context_len[j]`` (``None`` where no sample fell).
Version 2 added ``stats[].metrics``, ``checks[].n``, ``checks[].more_needed`` and ``policy``; a version-1 dict
is still accepted by the renderers (those keys filled with empty values).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from evalsuite.errors import EvalsuiteError
from evalsuite.store.records import SampleResult, VariantInfo
from evalsuite.gate.types import GateResult
from evalsuite.capacity.capacity import fmt_bytes  # where sizes are parsed; re-exported for the renderers
from evalsuite.stats.types import PairedStats

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
REQUIRED = ("schema_version", "run_id", "created", "model", "baseline", "overall", "exit_code", "variants",
            "stats", "checks")


@dataclass(frozen=True)
class Flip:
    """One sample whose score differs between the baseline and a variant."""

    variant: str
    task: str
    sample_id: str
    prompt: str
    baseline_output: str
    variant_output: str
    baseline_score: float
    variant_score: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ReportModel:
    """Typed form of the report dict; ``to_dict()`` is what renderers and results.json take."""

    run_id: str
    created: str
    model: dict[str, Any]
    baseline: str
    gate: GateResult
    variants: list[VariantInfo] = field(default_factory=list)
    stats: list[PairedStats] = field(default_factory=list)
    needle_grid: dict[str, dict[str, list]] = field(default_factory=dict)
    flips: list[Flip] = field(default_factory=list)
    tasks: dict[str, str] = field(default_factory=dict)
    noise_floor: list[PairedStats] | None = None
    policy: dict[str, Any] | None = None
    kld_method: dict[str, Any] | None = None  # {"run": description, "rows": {variant: {method code: rows}}}
    #: {variant: {"verified"|"diverged"|"regenerated"|"generated": samples, "positions", "near_ties", "stepped",
    #: "audited", "audit_same"}}: how each variant's answers were obtained (``report.build.verification``)
    verification: dict[str, dict[str, int]] | None = None
    #: {"variant/task": seconds one pair took in this run (generation, KLD, verification)}: ``meta.seconds_per_pair``
    seconds_per_pair: dict[str, float] | None = None
    #: {task: {"drawn", "held", "seconds"}}: what the baseline's new samples cost (``report.build.baseline_cost``)
    baseline_cost: dict[str, dict[str, float]] | None = None
    #: {variant: {task: why that (variant, task) stopped drawing samples}}: a sequential run's ``meta.stopped``
    stopped: dict[str, dict[str, str]] | None = None
    #: lines shown as they are (``meta.notes``: a compared run's sources, scores and pairing)
    notes: list[str] | None = None
    #: the machine the run ran on (``meta.machine``, ``cpu.machine.machine_info``)
    machine: dict[str, Any] | None = None
    #: the decision per tenant (``tenants.run.decide_store``), for a run with tenants
    tenants: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "run_id": self.run_id, "created": self.created,
            "model": dict(self.model), "baseline": self.baseline, "overall": self.gate.overall,
            "exit_code": self.gate.exit_code,
            "variants": [{**v.to_dict(), "verdict": self.gate.variant_verdicts.get(v.variant)}
                         for v in self.variants],
            "stats": [s.to_dict() for s in self.stats], "checks": [c.to_dict() for c in self.gate.checks],
            "needle_grid": self.needle_grid, "flips": [f.to_dict() for f in self.flips], "tasks": dict(self.tasks),
            "policy": self.policy, "kld_method": self.kld_method, "verification": self.verification,
            "seconds_per_pair": self.seconds_per_pair, "baseline_cost": self.baseline_cost, "stopped": self.stopped,
            "notes": self.notes, "guarantee": dict(self.gate.guarantee) or None, "machine": self.machine,
            "tenants": self.tenants}
        if self.noise_floor is not None:
            d["noise_floor"] = [s.to_dict() for s in self.noise_floor]
        return d


def check_report(report: dict[str, Any]) -> dict[str, Any]:
    """Raise a one-line EvalsuiteError unless ``report`` is a readable report dict; fill optional keys."""
    if not isinstance(report, dict):
        raise EvalsuiteError(f"report must be a dict, got {type(report).__name__}")
    missing = [k for k in REQUIRED if k not in report]
    if missing:
        raise EvalsuiteError(f"report is missing {', '.join(missing)}")
    if report["schema_version"] not in READABLE_VERSIONS:
        raise EvalsuiteError(f"report schema_version {report['schema_version']!r} is not one of "
                             f"{', '.join(map(str, READABLE_VERSIONS))}")
    out = dict(report)
    for key, empty in (("needle_grid", {}), ("flips", []), ("tasks", {}), ("noise_floor", None), ("policy", None),
                       ("kld_method", None), ("verification", None), ("seconds_per_pair", None),
                       ("baseline_cost", None), ("stopped", None), ("notes", None), ("guarantee", None),
                       ("machine", None), ("tenants", None)):
        out.setdefault(key, empty)
    out["stats"] = [{"metrics": {}, **s} for s in out["stats"]]
    out["checks"] = [{"n": 0, "more_needed": None, **c} for c in out["checks"]]
    return out


def needle_grid(samples: Iterable[SampleResult], depth_key: str = "depth",
                length_key: str = "context_len") -> dict[str, dict[str, list]]:
    """Mean score per (depth, context length) cell for each variant, from samples carrying both metadata keys."""
    cells: dict[str, dict[tuple[Any, Any], list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        if depth_key in s.metadata and length_key in s.metadata:
            cells[s.variant][(s.metadata[depth_key], s.metadata[length_key])].append(s.score)
    grids: dict[str, dict[str, list]] = {}
    for variant, by_cell in cells.items():
        depths = sorted({d for d, _ in by_cell})
        lengths = sorted({n for _, n in by_cell})
        score = [[(sum(v) / len(v)) if (v := by_cell.get((d, n))) else None for n in lengths] for d in depths]
        grids[variant] = {"context_len": lengths, "depth": depths, "score": score}
    return grids


def cell_verdict(checks: list[dict[str, Any]], variant: str, task: str, slice_: str | None = None) -> str | None:
    """Worst verdict among the checks of (variant, task[, slice]); None when no check covers it."""
    rank = {"PASS": 0, "INCONCLUSIVE": 1, "FAIL": 2}
    found = [c["verdict"] for c in checks if c["variant"] == variant and c["task"] == task
             and (slice_ is None or c["slice"] == slice_)]
    return max(found, key=lambda v: rank.get(v, 0)) if found else None


def ordered_reasons(checks: list[dict[str, Any]], limit: int = 10) -> list[dict[str, Any]]:
    """FAIL checks first, then INCONCLUSIVE (PASS omitted), at most ``limit``."""
    order = {"FAIL": 0, "INCONCLUSIVE": 1}
    bad = [c for c in checks if c["verdict"] in order]
    return sorted(bad, key=lambda c: order[c["verdict"]])[:limit]


def fmt_num(x: float | None, digits: int = 3) -> str:
    """A number for a table cell; an em dash for missing."""
    return "—" if x is None else f"{x:.{digits}f}"


def fmt_delta(delta: float, lo: float, hi: float) -> str:
    """``-0.050 [-0.090, -0.010]`` (signed)."""
    return f"{delta:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def stat_delta(s: dict[str, Any]) -> str:
    """A stats row's Δ [CI]; "no paired samples" for a row no pair reached (only the baseline answered)."""
    return fmt_delta(s["delta"], s["ci_low"], s["ci_high"]) if s.get("n") else "no paired samples"


def stat_mean(s: dict[str, Any], key: str) -> str:
    """A stats row's baseline or variant mean; "—" for a row no pair reached."""
    return fmt_num(s[key]) if s.get("n") else "—"


def fmt_ms(seconds: float | None) -> str:
    """Seconds shown as milliseconds."""
    return "—" if seconds is None else f"{seconds * 1000:.1f} ms"


def stat_label(s: dict[str, Any]) -> str:
    """``variant · task`` plus `` · slice`` unless the slice is ``all``."""
    return f"{s['variant']} · {s['task']}" + ("" if s["slice"] == "all" else f" · {s['slice']}")


def sorted_stats(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Stats in variant order (as listed in ``variants``), then task, then ``all`` before its slices."""
    order = {v["variant"]: i for i, v in enumerate(report["variants"])}
    return sorted(report["stats"], key=lambda s: (order.get(s["variant"], len(order)), s["variant"], s["task"],
                                                  s["slice"] != "all", s["slice"]))


__all__ = ["Flip", "ReportModel", "SCHEMA_VERSION", "cell_verdict", "check_report", "fmt_bytes",
           "fmt_delta", "fmt_ms", "fmt_num", "needle_grid", "ordered_reasons", "sorted_stats", "stat_delta",
           "stat_label", "stat_mean"]
