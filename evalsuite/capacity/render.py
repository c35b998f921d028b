"""Plain-text rendering of a Plan (the ``--json`` form is ``Plan.to_dict()``)."""
from __future__ import annotations

from evalsuite.capacity.capacity import GIB, Plan
from evalsuite.capacity.shape import count_params


def _table(header: list[str], rows: list[list[str]], left: int = 1) -> list[str]:
    """Fixed-width columns: the first ``left`` left-aligned, the rest right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(("{:<%d}" if i < left else "{:>%d}") % w for i, w in enumerate(widths))
    lines = [fmt.format(*header), "  ".join("-" * w for w in widths)]
    return lines + [fmt.format(*r) for r in rows]


def _tokens(x: float | None) -> str:
    if x is None:
        return "never"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    return f"{x / 1e3:.1f}k" if x >= 1e4 else f"{x:,.0f}"


def _gib(x: float) -> str:
    return f"{x / GIB:.2f}"


def render_text(plan: Plan) -> str:
    """Model summary, weights table, KV table and the combination table."""
    s, p = plan.shape, count_params(plan.shape)
    out = [f"model: {s.model_type}, {p.total / 1e9:.3f}B params, {s.layers} layers, {s.attention} "
           f"({s.heads} heads / {s.kv_heads} KV heads, head dim {s.head_dim}), "
           f"{'tied' if s.tied else 'untied'} embeddings",
           f"budget: {_gib(plan.gpu_mem)} GiB GPU - {_gib(plan.reserve)} GiB reserve; "
           f"context {plan.context:,}, batch {plan.batch}", ""]
    out += _table(["weights", "GiB", "bytes", "quantized params", "metadata B"],
                  [[w["name"], _gib(w["total"]), f"{w['total']:,}", f"{w['quantized_params']:,}",
                    f"{w['metadata']:,}"] for w in plan.weights])
    out.append("")
    out += _table(["kv", "B/token", "MiB/request", "max full-precision tokens"],
                  [[k["name"], f"{k['bytes_per_token']:,.0f}", f"{k['bytes_per_request'] / 2**20:,.1f}",
                    str(k["full_precision_tokens"])] for k in plan.kv])
    out.append("")
    rows = [[c.weights, c.kv, _gib(c.kv_pool_bytes) if c.fits else "no fit", _tokens(c.max_tokens),
             str(c.max_requests), _tokens(c.kv_equals_weights_context), _tokens(c.crossover_tokens),
             f"{c.decode_speedup:.2f}x", f"{c.arithmetic_intensity:.1f}", f"{c.compute_roof:g}x"]
            for c in plan.combos]
    out += _table(["weights", "kv", "KV pool GiB", "max tokens", f"reqs@{plan.context}",
                   f"KV=W ctx@b{plan.batch}", "KV>W savings at", "decode speedup", "FLOP/B", "compute roof"],
                  rows, left=2)
    out += ["", "KV=W ctx: per-request context at which the cache is as large as the weights; "
            "KV>W savings at: retained tokens past which KV savings (vs bf16 KV) exceed weight savings "
            "(vs bf16 weights); decode speedup: bandwidth-bound, vs bf16/bf16 at the same batch and context; "
            "FLOP/B: arithmetic intensity 16·batch / weight bits; compute roof: peak matmul rate vs bf16 "
            "(2x with 8-bit activations, w8a8 / wf8af8)."]
    if s.sliding_window and s.max_position and s.sliding_window < plan.context:
        out.append(f"note: the config has sliding_window={s.sliding_window}; a rolling cache would cap each "
                   "request's KV there (not assumed here).")
    return "\n".join(out)
