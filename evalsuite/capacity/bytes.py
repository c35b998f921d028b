"""Weight bytes and KV-cache bytes per token from a ModelShape and a precision (pure arithmetic, no torch).

Weights follow ``evalsuite.variants.memory.formula_bytes``: quantized Linear weights take bits/8 bytes per param;
int4/int2 keep a scale and a zero point per group (``dtype_bytes`` each), int8 and float8 one scale per output row;
everything not quantized (embeddings, the excluded/tied ``lm_head``, norms, biases) stays at ``dtype_bytes``.
KV: ``evalsuite.kvcache.bytes``, the formula evalsuite's cache counts its own bytes with (int b bits = b/8 bytes
per value + a float16 scale and zero point per group; FP8 = 1 byte + a scale per group). Per sequence, up to a
residual block of the newest tokens stays at ``dtype_bytes`` (``full_precision_tokens``; the worst case is planned).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from evalsuite.kvcache import bytes as kvbytes
from evalsuite.kvcache.bytes import KVDims, full_precision_tokens
from evalsuite.kvcache.config import KVConfig
from evalsuite.capacity.shape import ModelShape, count_params
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


def kv_dims(shape: ModelShape) -> KVDims:
    """The KV cache's shape of a planned model."""
    return KVDims(shape.layers, shape.kv_heads, shape.head_dim)


def kv_bytes_per_token(shape: ModelShape, kv: KVConfig | None, dtype_bytes: int = 2) -> float:
    """Steady-state KV bytes per retained token (``kvcache.bytes.kv_bytes_per_token``: the one formula)."""
    return kvbytes.kv_bytes_per_token(kv, kv_dims(shape), dtype_bytes)


def kv_bytes_for_context(shape: ModelShape, kv: KVConfig | None, context: int, dtype_bytes: int = 2) -> float:
    """KV bytes of one sequence of ``context`` tokens, worst case: up to ``full_precision_tokens`` unquantized."""
    return kvbytes.kv_bytes_for_context(kv, kv_dims(shape), context, dtype_bytes)


__all__ = ["WeightBreakdown", "full_precision_tokens", "kv_bytes_for_context", "kv_bytes_per_token", "kv_dims",
           "weight_breakdown", "weight_bytes"]
