"""Report figures as PNG bytes: needle heatmaps, Δ ± CI forest plot, quality-vs-bytes and KLD-vs-bytes scatters
with the Pareto front marked.

Figures are ``matplotlib.figure.Figure`` objects drawn on their own Agg canvas (``FigureCanvasAgg``), never through
pyplot: nothing here selects a backend, so importing evalsuite or rendering a report leaves a notebook's
``matplotlib`` backend as it was (``tests/test_import.py``), and no figure is registered with pyplot to close."""
from __future__ import annotations

import base64
import io
from typing import Any, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 100


def data_uri(png: bytes) -> str:
    """``data:image/png;base64,...`` for embedding in HTML."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def figure(**kw: Any) -> Figure:
    """A figure on its own Agg canvas (no pyplot, no backend switch): ``Figure(**kw)``."""
    fig = Figure(**kw)
    FigureCanvasAgg(fig)
    return fig


def png(fig: Figure) -> bytes:
    """``fig`` as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def _grid_array(grid: dict[str, list]) -> np.ndarray:
    return np.array([[np.nan if v is None else float(v) for v in row] for row in grid["score"]], dtype=float)


def _heat(ax: Any, arr: np.ndarray, grid: dict[str, list], title: str, cmap: str, vmin: float,
          vmax: float) -> Any:
    im = ax.imshow(arr, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", origin="upper")
    ax.set_xticks(range(len(grid["context_len"])), [str(c) for c in grid["context_len"]], rotation=45)
    ax.set_yticks(range(len(grid["depth"])), [f"{d:g}" if isinstance(d, float) else str(d) for d in grid["depth"]])
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("needle depth")
    ax.set_title(title, fontsize=10)
    for (i, j), v in np.ndenumerate(arr):
        if not np.isnan(v):
            r, g, b, _ = im.cmap(im.norm(v))
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8,
                    color="black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white")
    return im


def needle_heatmap(grid: dict[str, list], name: str, baseline: dict[str, list] | None = None) -> bytes:
    """Mean score per (depth × context length); with ``baseline`` (same axes) a second panel shows Δ."""
    arr = _grid_array(grid)
    same_axes = baseline is not None and baseline["context_len"] == grid["context_len"] \
        and baseline["depth"] == grid["depth"]
    fig = figure(figsize=(10 if same_axes else 5.5, 3.8))
    axes = fig.subplots(1, 2 if same_axes else 1, squeeze=False)
    im = _heat(axes[0][0], arr, grid, f"{name}: mean score", "viridis", 0.0, 1.0)
    fig.colorbar(im, ax=axes[0][0], fraction=0.046)
    if same_axes:
        diff = arr - _grid_array(baseline)
        im2 = _heat(axes[0][1], diff, grid, f"{name} − baseline", "RdBu", -1.0, 1.0)
        fig.colorbar(im2, ax=axes[0][1], fraction=0.046)
    fig.tight_layout()
    return png(fig)


def forest_plot(rows: Sequence[dict[str, Any]], tolerances: Sequence[float] = ()) -> bytes:
    """Δ (variant − baseline) with its CI, one row per dict (``label``, ``delta``, ``lo``, ``hi``, optional
    ``verdict`` for the colour); dashed lines at each tolerance (e.g. −max_drop) and a solid one at 0."""
    colours = {"PASS": "#2e7d32", "FAIL": "#c62828", "INCONCLUSIVE": "#ef8f00"}
    fig = figure(figsize=(8, 0.9 + 0.32 * max(1, len(rows))))
    ax = fig.subplots()
    ys = np.arange(len(rows))[::-1]
    for y, r in zip(ys, rows):
        c = colours.get(str(r.get("verdict")), "#37474f")
        xerr = [[max(0.0, r["delta"] - r["lo"])], [max(0.0, r["hi"] - r["delta"])]]
        ax.errorbar(r["delta"], y, xerr=xerr, fmt="o", color=c,
                    ecolor=c, capsize=3, markersize=5)
    ax.axvline(0.0, color="black", linewidth=1)
    for t in sorted(set(tolerances)):
        ax.axvline(t, color="#c62828", linestyle="--", linewidth=1)
    ax.set_yticks(ys, [str(r["label"]) for r in rows], fontsize=8)
    ax.set_xlabel("Δ score vs baseline (95% paired bootstrap CI)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return png(fig)


def pareto_front(points: Sequence[dict[str, Any]], higher_is_better: bool = True) -> list[str]:
    """Names of the points no other point beats on both fewer bytes and a better score."""
    def better(a: dict, b: dict) -> bool:  # a dominates b
        sa, sb = (a["score"], b["score"]) if higher_is_better else (-a["score"], -b["score"])
        return a["bytes"] <= b["bytes"] and sa >= sb and (a["bytes"] < b["bytes"] or sa > sb)
    return [p["name"] for p in points if not any(better(q, p) for q in points if q is not p)]


def _byte_unit(largest: float) -> tuple[str, int]:
    """The binary unit that keeps axis numbers small and round."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if largest >= size:
            return unit, size
    return "B", 1


def quality_vs_bytes(points: Sequence[dict[str, Any]], xlabel: str = "weight bytes",
                     ylabel: str = "score", higher_is_better: bool = True) -> bytes:
    """Scatter of ``score`` vs ``bytes`` (axis scaled to KiB/MiB/GiB) with ``lo``/``hi`` error bars; the Pareto
    front (fewest bytes for the best score) joined and ringed."""
    unit, scale = _byte_unit(max((p["bytes"] for p in points), default=0))
    points = [{**p, "bytes": p["bytes"] / scale} for p in points]
    fig = figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for p in points:
        lo, hi = sorted((p.get("lo", p["score"]), p.get("hi", p["score"])))
        yerr = [[max(0.0, p["score"] - lo)], [max(0.0, hi - p["score"])]]
        ax.errorbar(p["bytes"], p["score"], yerr=yerr, fmt="o",
                    color="#1565c0", capsize=3)
        ax.annotate(str(p["name"]), (p["bytes"], p["score"]), textcoords="offset points", xytext=(5, 5),
                    fontsize=8)
    front = set(pareto_front(points, higher_is_better))
    fp = sorted((p for p in points if p["name"] in front), key=lambda p: p["bytes"])
    if fp:
        ax.plot([p["bytes"] for p in fp], [p["score"] for p in fp], "-", color="#c62828", alpha=0.6,
                label="Pareto front")
        ax.scatter([p["bytes"] for p in fp], [p["score"] for p in fp], s=140, facecolors="none",
                   edgecolors="#c62828")
        ax.legend(fontsize=8)
    ax.set_xlabel(f"{xlabel} ({unit})" if unit != "B" else xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return png(fig)


def kld_vs_bytes(points: Sequence[dict[str, Any]], xlabel: str = "weight bytes",
                 ylabel: str = "mean KLD vs baseline (lower is better)") -> bytes:
    """The same scatter for KL divergence, where lower is better (the front is the low-bytes, low-KLD edge)."""
    return quality_vs_bytes(points, xlabel, ylabel, higher_is_better=False)
