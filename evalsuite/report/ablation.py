"""Ablations: expand sweep patterns, then tabulate and plot quality and KLD against bytes with Pareto fronts."""
from __future__ import annotations

import itertools
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from evalsuite.errors import EvalsuiteError
from evalsuite.gate.store_gate import GatedRun
from evalsuite.report.plots import kld_vs_bytes, pareto_front, quality_vs_bytes
from evalsuite.store.records import VariantInfo

_BRACE = re.compile(r"\{([^{}]*)\}")


def expand_sweep(pattern: str) -> list[str]:
    """``w4g{32,64}`` -> [w4g32, w4g64]; several braces expand as a product; no braces -> [pattern]."""
    parts = _BRACE.split(pattern)
    literals, choices = parts[0::2], parts[1::2]
    if any(not c.strip() for c in choices) or "{" in "".join(literals) or "}" in "".join(literals):
        raise EvalsuiteError(f"bad --sweep {pattern!r}: expected e.g. w4g{{32,64,128}} or kv4g{{32,64}}")
    options = [[o.strip() for o in c.split(",")] for c in choices]
    out = []
    for combo in itertools.product(*options):
        out.append("".join(lit + val for lit, val in itertools.zip_longest(literals, combo, fillvalue="")))
    return out


@dataclass(frozen=True)
class AblationPoint:
    """One variant × task: bytes on the axis it sweeps, score with CI, KLD."""

    variant: str
    task: str
    axis: str  # "weight_bytes" or "kv_bytes_per_token"
    bytes: float
    score: float
    lo: float
    hi: float
    kld: float | None
    pareto: bool = False


def _axis(info: VariantInfo, baseline: VariantInfo) -> tuple[str, float]:
    """KV-only variants are placed on the KV-bytes axis, everything else on weight bytes."""
    kv_only = info.weight_bytes == baseline.weight_bytes and info.variant != baseline.variant
    if kv_only:
        return "kv_bytes_per_token", float(info.kv_formula_bytes_per_token or 0.0)
    return "weight_bytes", float(info.weight_bytes)


def ablation_points(gated: GatedRun, infos: dict[str, VariantInfo]) -> list[AblationPoint]:
    """Points for every (variant incl. baseline, task) on its axis; Pareto flags per (task, axis)."""
    base = infos[gated.baseline]
    pts: list[AblationPoint] = []
    for s in (s for s in gated.stats if s.slice == "all"):
        axis, nbytes = _axis(infos[s.variant], base)
        pts.append(AblationPoint(s.variant, s.task, axis, nbytes, s.variant_mean, s.variant_mean + s.ci_low - s.delta,
                                 s.variant_mean + s.ci_high - s.delta, s.kld_mean))
    base_scores = {s.task: s.baseline_mean for s in gated.stats if s.slice == "all"}
    for task, score in base_scores.items():
        for axis, nbytes in (("weight_bytes", base.weight_bytes),
                             ("kv_bytes_per_token", base.kv_formula_bytes_per_token or 0.0)):
            if any(p.task == task and p.axis == axis for p in pts):
                pts.append(AblationPoint(gated.baseline, task, axis, float(nbytes), score, score, score, 0.0))
    front: set[tuple[str, str, str]] = set()
    for (task, axis), group in itertools.groupby(sorted(pts, key=lambda p: (p.task, p.axis)),
                                                 key=lambda p: (p.task, p.axis)):
        group = list(group)
        names = pareto_front([{"name": p.variant, "bytes": p.bytes, "score": p.score} for p in group])
        front |= {(task, axis, n) for n in names}
    return [AblationPoint(**{**asdict(p), "pareto": (p.task, p.axis, p.variant) in front}) for p in pts]


def write_ablation(points: list[AblationPoint], out: Path) -> list[Path]:
    """ablation.json, ablation.md and one PNG per (task, axis) for score and KLD."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "ablation.json", out / "ablation.md"]
    (out / "ablation.json").write_text(json.dumps([asdict(p) for p in points], indent=1))
    lines = ["| task | axis | variant | bytes | score [95% CI] | KLD | Pareto |", "|---|---|---|---|---|---|---|"]
    for p in sorted(points, key=lambda p: (p.task, p.axis, p.bytes)):
        kld = "-" if p.kld is None else f"{p.kld:.4f}"
        lines.append(f"| {p.task} | {p.axis} | {p.variant} | {p.bytes:,.0f} | {p.score:.3f} [{p.lo:.3f}, {p.hi:.3f}]"
                     f" | {kld} | {'★' if p.pareto else ''} |")
    (out / "ablation.md").write_text("\n".join(lines) + "\n")
    for (task, axis), group in itertools.groupby(sorted(points, key=lambda p: (p.task, p.axis)),
                                                 key=lambda p: (p.task, p.axis)):
        group = list(group)
        if len(group) < 2:
            continue
        label = "weight bytes" if axis == "weight_bytes" else "KV bytes per token"
        pts = [{"name": p.variant, "bytes": p.bytes, "score": p.score, "lo": p.lo, "hi": p.hi} for p in group]
        path = out / f"ablation_{task}_{axis}.png"
        path.write_bytes(quality_vs_bytes(pts, xlabel=label, ylabel=f"{task} score"))
        written.append(path)
        kpts = [{"name": p.variant, "bytes": p.bytes, "score": p.kld} for p in group if p.kld is not None]
        if len(kpts) >= 2:
            kpath = out / f"ablation_{task}_{axis}_kld.png"
            kpath.write_bytes(kld_vs_bytes(kpts, xlabel=label))
            written.append(kpath)
    return written
