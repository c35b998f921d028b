"""``--fix``: keep the most sensitive units at higher precision, one at a time in ranking order, re-measuring the
mixed variant after each addition, until its KLD is under the target (or the parameter budget is spent); then
gate the original and the proposed variant against the baseline with ``evalsuite run`` in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from evalsuite.sensitivity.measure import Measured, Measurer, Sensitivity, kv_keep, measure_variant
from evalsuite.variants.spec import VariantSpec


@dataclass
class FixResult:
    """What ``--fix`` proposes and what it measured."""

    target: float
    original: str
    proposed: str
    keep: list[str]
    kv_keep: list[int]
    before: Measured
    after: Measured
    reached: bool
    kept_params: int
    linear_params: int
    steps: list[dict[str, Any]] = field(default_factory=list)
    bytes_before: dict[str, int] = field(default_factory=dict)
    bytes_after: dict[str, int] = field(default_factory=dict)
    verdicts: dict[str, str] = field(default_factory=dict)
    gate_run: str | None = None

    @property
    def kept_fraction(self) -> float:
        return self.kept_params / max(self.linear_params, 1)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kept_fraction"] = self.kept_fraction
        d["extra_bytes"] = self.bytes_after.get("measured", 0) - self.bytes_before.get("measured", 0)
        return d


def proposed_spec(spec: VariantSpec, keep: list[str], kv_layers: list[int], layer_of: dict[str, int]) -> VariantSpec:
    """The mixed variant keeping ``keep`` (weight unit patterns, written in layer order) and ``kv_layers``."""
    weights = spec.weights.with_keep(sorted(keep, key=lambda p: (layer_of[p], p)))
    kv = kv_keep(spec.kv, kv_layers) if kv_layers else spec.kv
    return replace(spec, weights=weights, kv=kv, label=None)


def greedy_fix(measurer: Measurer, spec: VariantSpec, sens: Sensitivity, qunits: dict[str, Any], target: float,
               max_keep_frac: float, log: Callable[[str], None] = print) -> FixResult:
    """Add units in ranking order (most sensitive first), re-measuring the mixed variant, until KLD < target.
    Weight units past ``max_keep_frac`` of the quantized Linear parameters are skipped."""
    total = sum(r.params for r in sens.results if r.side == "weights")
    layer_of = {r.unit: r.layer for r in sens.results if r.side == "weights"}
    keep: list[str] = []
    kv_layers: list[int] = []
    kept = 0
    now = sens.variant_kld
    steps = [{"added": None, "kld": now.kld, "kept_fraction": 0.0}]
    for r in sens.ranked():
        if now.kld < target:
            break
        if r.side == "weights":
            if (kept + r.params) / max(total, 1) > max_keep_frac:
                continue
            keep.append(r.unit)
            kept += r.params
        else:
            kv_layers.append(r.layer)
        now = measure_variant(measurer, spec, qunits, tuple(keep), tuple(kv_layers))
        steps.append({"added": f"{r.side}:{r.unit}", "kld": now.kld, "kept_fraction": kept / max(total, 1)})
        log(f"  keep {r.side}:{r.unit:<20} -> KLD {now.kld:.4f} (linear params kept {kept / max(total, 1):.1%})")
    new = proposed_spec(spec, keep, kv_layers, layer_of)
    return FixResult(target=target, original=spec.name, proposed=new.name, keep=keep, kv_keep=kv_layers,
                     before=sens.variant_kld, after=now, reached=now.kld < target, kept_params=kept,
                     linear_params=total, steps=steps)


def gate_variants(variants: list[str], tasks: list[str], limit: int, seed: int, params: tuple[str, ...],
                  model: str, dtype: str, out: Path, policy: Path | None, device: str = "auto",
                  task_config: str | None = None) -> tuple[dict[str, str], Path]:
    """Run ``evalsuite run`` on the baseline and ``variants`` in a subprocess; the verdict of each variant."""
    from evalsuite.gate.store_gate import gate_store
    from evalsuite.store.sqlite import Store

    run_id = "gate"
    cmd = [sys.executable, "-c", "from evalsuite.cli import main; main()", "run", "--variants", ",".join(variants),
           "--tasks", ",".join(tasks), "--limit", str(limit), "--seed", str(seed), "--model", model, "--dtype", dtype,
           "--device", device,
           "--out", str(out), "--run-id", run_id, "--quiet", "--no-gate"]
    for p in params:
        cmd += ["--param", p]
    if task_config is not None:
        cmd += ["--task-config", task_config]
    # the child imports what this process imports (this evalsuite, wherever it is installed)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        from evalsuite.errors import EvalsuiteError

        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise EvalsuiteError(f"gating run failed (exit {proc.returncode}): {tail[0]}")
    gated = gate_store(Store.open(out / run_id), policy)
    return dict(gated.gate.variant_verdicts), out / run_id
