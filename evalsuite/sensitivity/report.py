"""Sensitivity output: a ranked table (stdout), ``results.json`` and ``sensitivity.png`` (KLD by layer, weights and
KV side by side), and reading a ranking back (``evalsuite ablate --sensitivity``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalsuite.errors import EvalsuiteError
from evalsuite.sensitivity.measure import Sensitivity, UnitResult

RESULTS_VERSION = 1


def ranked_table(sens: Sensitivity, top: int | None = None) -> str:
    """Markdown table of units, most sensitive first."""
    rows = sens.ranked()[:top] if top else sens.ranked()
    lines = ["| rank | side | unit | KLD | top-1 | params |", "|---:|---|---|---:|---:|---:|"]
    for i, r in enumerate(rows, 1):
        lines.append(f"| {i} | {r.side} | {r.unit} | {r.kld:.4f} | {r.top1:.3f} | {r.params or ''} |")
    return "\n".join(lines)


def write_results(out: Path, meta: dict[str, Any], sens: Sensitivity, fix: dict[str, Any] | None) -> Path:
    """``results.json``: settings, every unit's result, the whole variant's KLD, and the --fix outcome."""
    out.mkdir(parents=True, exist_ok=True)
    data = {"version": RESULTS_VERSION, **meta, "seconds": sens.seconds,
            "variant_kld": sens.variant_kld.to_dict() if sens.variant_kld else None,
            "units": [r.__dict__ for r in sens.ranked()], "fix": fix}
    path = out / "results.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def plot(out: Path, sens: Sensitivity, title: str) -> Path:
    """KLD per layer: weight units (summed per layer for module units) and KV layers side by side."""
    from evalsuite.report.plots import figure

    sides = [s for s in ("weights", "kv") if any(r.side == s for r in sens.results)]
    fig = figure(figsize=(6 * len(sides), 3.6))  # its own Agg canvas: the caller's backend is left as it is
    axes = fig.subplots(1, len(sides), squeeze=False)
    for ax, side in zip(axes[0], sides):
        per_layer: dict[int, float] = {}
        for r in sens.results:
            if r.side == side:
                per_layer[r.layer] = per_layer.get(r.layer, 0.0) + r.kld
        layers = sorted(per_layer)
        ax.bar(layers, [per_layer[i] for i in layers], color="tab:blue" if side == "weights" else "tab:orange")
        ax.set_xlabel("decoder layer")
        ax.set_ylabel("KLD (only this unit quantized)")
        ax.set_title(f"{side}: {title}")
    fig.tight_layout()
    path = out / "sensitivity.png"
    fig.savefig(path, dpi=110)
    return path


def load_ranking(path: Path, side: str = "weights") -> list[UnitResult]:
    """The ranked units of a ``results.json`` (most sensitive first)."""
    try:
        data = json.loads(Path(path).read_text())
        units = [UnitResult(**u) for u in data["units"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EvalsuiteError(f"cannot read sensitivity results {path}: {exc}") from None
    return sorted((u for u in units if u.side == side), key=lambda u: -u.kld)


def resolve_top(spec_text: str, ranking: list[UnitResult]) -> str:
    """``w4g64[keep=top4]`` -> ``w4g64[keep=l3,l0,...]`` (the 4 most sensitive units); ``top0`` drops the
    keep option. Specs without ``topN`` come back unchanged."""
    import re

    def sub(m: re.Match[str]) -> str:
        n = int(m[1])
        if n > len(ranking):
            raise EvalsuiteError(f"{spec_text}: top{n} asks for more units than the ranking has ({len(ranking)})")
        return ",".join(u.unit for u in ranking[:n]) if n else ""

    text = re.sub(r"top(\d+)", sub, spec_text)
    return re.sub(r"\[keep=\]|keep=;|;keep=(?=\])", "", text).replace("[]", "")
