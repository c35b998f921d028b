"""Weight bytes and KV-cache bytes per token from a ModelShape and a precision (pure arithmetic, no torch).

Weights follow ``evalsuite.variants.memory.formula_bytes``: quantized Linear weights take bits/8 bytes per param;
int4/int2 keep a scale and a zero point per group (``dtype_bytes`` each), int8 and float8 one scale per output row;
everything not quantized (embeddings, the excluded/tied ``lm_head``, norms, biases) stays at ``dtype_bytes``.
KV: int b bits = b/8 bytes per value + a scale and a zero point per group; FP8 = 1 byte + a scale per group,
groups resolved as evalsuite's cache does (see ``_kv_groups``). Per sequence, up to a residual block of the newest
tokens stays at ``dtype_bytes`` (``full_precision_tokens``; the worst case is planned).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from evalsuite.errors import EvalsuiteError
from evalsuite.kvcache.config import KVConfig, check_layers, layer_config
from evalsuite.plan.shape import ModelShape, count_params
from evalsuite.variants.mixed import resolve_rules, rule_bytes
from evalsuite.variants.spec import WeightSpec


@dataclass(frozen=True)
class WeightBreakdown:
    """Bytes of one weight precision: quantized payload, its metadata, and the unquantized rest."""

    total: int
    payload: int
    metadata: int
    unquantized: int
    quantized_params: int
    unquantized_params: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def _linear_names(shape: ModelShape) -> dict[str, tuple[int, int]]:
    """HF name -> (out, in) of every Linear weight of the model (lm_head only when untied)."""
    out = {f"model.layers.{i}.{name}": (o, n_in) for i in range(shape.layers)
           for name, o, n_in, _ in shape.layer_linears()}
    if not shape.tied:
        out["lm_head"] = (shape.vocab, shape.hidden)
    return out


def weight_breakdown(shape: ModelShape, spec: WeightSpec, dtype_bytes: int = 2) -> WeightBreakdown:
    """Bytes of the model's weights at ``spec`` (``fmt == 'none'``: every param at ``dtype_bytes``).

    Mixed precision counts each Linear at the precision its first matching ``[...]`` option gives it; groups
    that do not divide a layer's input width fall back as quanto does (``effective_group``)."""
    total_params = count_params(shape).total
    if spec.fmt == "none":
        return WeightBreakdown(total_params * dtype_bytes, 0, 0, total_params * dtype_bytes, 0, total_params)
    linears = _linear_names(shape)
    payload = meta = q_params = 0.0
    for name, rule in resolve_rules(list(linears), spec).items():
        if rule is None:
            continue
        out_f, in_f = linears[name]
        pay, m = rule_bytes(rule, out_f, in_f, dtype_bytes)
        q_params += out_f * in_f
        payload += pay
        meta += m
    unq = total_params - int(q_params)
    total = int(math.ceil(payload)) + int(meta) + unq * dtype_bytes
    return WeightBreakdown(total, int(math.ceil(payload)), int(meta), unq * dtype_bytes, int(q_params), unq)


def weight_bytes(shape: ModelShape, spec: WeightSpec, dtype_bytes: int = 2) -> int:
    """Total weight bytes at ``spec``."""
    return weight_breakdown(shape, spec, dtype_bytes).total


def kv_values_per_token(shape: ModelShape) -> int:
    """Keys and values stored per token: 2 × layers × KV heads × head dim."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim


def _kv_groups(kv: KVConfig, head_dim: int) -> tuple[int, int]:
    """(key group, value group) as evalsuite's cache resolves them: values group along the head dim (0 or a
    group past it = the whole head dim); per-channel keys group along tokens (0 = the residual block)."""
    dim_group = head_dim if kv.group == 0 or kv.group >= head_dim else kv.group
    if head_dim % dim_group:
        raise EvalsuiteError(f"{kv.name}: KV group {kv.group} does not divide head_dim {head_dim}")
    if kv.key_axis == "channel":
        if kv.group == 0 and kv.residual == 0:
            raise EvalsuiteError(f"{kv.name}: per-channel keys with group 0 need a residual > 0")
        return (kv.group or kv.residual), dim_group
    return dim_group, dim_group


def kv_bytes_per_value(shape: ModelShape, kv: KVConfig | None, dtype_bytes: int = 2) -> float:
    """Bytes per stored K/V value once quantized, metadata included (``None``: unquantized).

    Metadata: a scale (and a zero point for int formats) of ``dtype_bytes`` per group; the same formula as
    ``evalsuite.kvcache.kv_bytes_per_token``, without importing torch.
    """
    if kv is None:
        return float(dtype_bytes)
    if kv.layer_bits:  # per-layer bits: the mean over layers
        check_layers(kv, shape.layers)
        return sum(kv_bytes_per_value(shape, layer_config(kv, i), dtype_bytes)
                   for i in range(shape.layers)) / shape.layers
    if kv.backend == "hf":
        return kv.bits / 8 + 2 * dtype_bytes / kv.group
    n_meta = 2 if kv.fmt == "int" else 1
    bits = kv.bits if kv.fmt == "int" else 8
    key_group, value_group = _kv_groups(kv, shape.head_dim)
    return bits / 8 + n_meta * dtype_bytes * (1 / key_group + 1 / value_group) / 2


def kv_bytes_per_token(shape: ModelShape, kv: KVConfig | None, dtype_bytes: int = 2) -> float:
    """Steady-state KV bytes per retained token (tokens past the full-precision residual window)."""
    return kv_values_per_token(shape) * kv_bytes_per_value(shape, kv, dtype_bytes)


def full_precision_tokens(kv: KVConfig | None, head_dim: int) -> int:
    """Most tokens of one sequence held unquantized at any time (worst case): evalsuite's cache quantizes in
    blocks of ``flush`` tokens (the residual rounded up to whole key groups), keeping ``n mod flush`` exact;
    transformers' QuantizedCache keeps up to ``residual`` tokens."""
    if kv is None:
        return 0
    if kv.backend == "hf":
        return kv.residual
    key_group, _ = _kv_groups(kv, head_dim)
    if kv.key_axis == "channel":
        flush = -(-max(kv.residual, key_group) // key_group) * key_group
    else:
        flush = max(kv.residual, 1)
    return flush - 1


def kv_bytes_for_context(shape: ModelShape, kv: KVConfig | None, context: int, dtype_bytes: int = 2) -> float:
    """KV bytes of one sequence of ``context`` tokens, worst case: up to ``full_precision_tokens`` unquantized."""
    full = kv_bytes_per_token(shape, None, dtype_bytes)
    if kv is None:
        return context * full
    recent = min(context, full_precision_tokens(kv, shape.head_dim))
    return recent * full + (context - recent) * kv_bytes_per_token(shape, kv, dtype_bytes)
