"""KV-cache bytes per token, and how a ``KVConfig``'s groups resolve: the one formula, pure arithmetic (no torch).

Every byte figure of a KV cache comes from here: the in-process cache's own accounting (``kvcache.cache``), the
capacity planner (``capacity.bytes``) and the vLLM engine's server sizing (``backends.served.vllm.sizes``).

Per token and layer, K and V hold ``kv_heads x head_dim`` values each. Unquantized: ``dtype_bytes`` per value.
evalsuite's cache: ``bits / 8`` per value plus, per group, a float16 scale (and a float16 zero point for int formats);
keys grouped along tokens (per-channel, KIVI) or along the head dim (per-token), values along the head dim.
transformers' QuantizedCache (``backend="hf"``, quanto): ``bits / 8`` plus a scale and a shift in the model's dtype
per group. Per-layer bits average over the layers.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, NamedTuple

from evalsuite.dims import head_dim as config_head_dim
from evalsuite.errors import EvalsuiteError
from evalsuite.kvcache.config import KVConfig, check_layers, layer_config

META_BYTES = 2  #: evalsuite's cache stores its scales and zero points as float16


class KVDims(NamedTuple):
    """The shape of a model's KV cache: decoder layers, KV heads, head dim."""

    layers: int
    kv_heads: int
    head_dim: int

    @property
    def values_per_token(self) -> int:
        """Keys and values stored per token: 2 x layers x KV heads x head dim."""
        return 2 * self.layers * self.kv_heads * self.head_dim


def model_dims(model_config: Any) -> KVDims:
    """``KVDims`` of a transformers config object or a ``config.json`` mapping (its text config when it has one)."""
    cfg = model_config
    if hasattr(cfg, "get_text_config"):
        cfg = cfg.get_text_config(decoder=True)
    elif isinstance(cfg, Mapping) and isinstance(cfg.get("text_config"), Mapping):
        cfg = cfg["text_config"]
    get = cfg.get if isinstance(cfg, Mapping) else (lambda k, d=None: getattr(cfg, k, d))
    heads, layers = get("num_attention_heads"), get("num_hidden_layers")
    if not heads or not layers:
        raise EvalsuiteError("model config has no num_attention_heads / num_hidden_layers: cannot size its KV cache")
    kv_heads = get("num_key_value_heads") or heads
    return KVDims(int(layers), int(kv_heads), config_head_dim(cfg))


@dataclass(frozen=True)
class KVGroups:
    """How evalsuite's cache groups one config at one head dim (``kv_groups``)."""

    key_group: int  # tokens per key group (per-channel keys) or head-dim values per group (per-token keys)
    value_group: int  # head-dim values per value group
    flush: int  # tokens quantized at once: the residual rounded up to whole key token-groups (per-channel)


def kv_groups(config: KVConfig, head_dim: int) -> KVGroups:
    """Resolve a config's groups at ``head_dim``; bad combinations are a one-line EvalsuiteError.

    Values group along the head dim (group 0, or one past it, is the whole head dim). Per-channel keys group along
    tokens (group 0: the residual block) and flush in blocks of the residual rounded up to whole key groups;
    per-token keys group as values do and flush every ``residual`` tokens."""
    if config.fmt == "int" and config.bits not in (8, 4, 2):
        raise EvalsuiteError(f"KV cache: int bits must be 8, 4 or 2, got {config.bits}")
    if config.fmt not in ("int", "fp8e4", "fp8e5"):
        raise EvalsuiteError(f"KV cache: unknown format {config.fmt!r} (int, fp8e4, fp8e5)")
    if config.group < 0 or config.residual < 0:
        raise EvalsuiteError("KV cache: group and residual must be >= 0")
    dim_group = head_dim if config.group == 0 or config.group >= head_dim else config.group
    if head_dim % dim_group:
        raise EvalsuiteError(f"KV cache: group {config.group} does not divide head_dim {head_dim}")
    if config.key_axis != "channel":
        return KVGroups(dim_group, dim_group, max(config.residual, 1))
    if config.group == 0 and config.residual == 0:
        raise EvalsuiteError("KV cache: per-channel keys with group 0 need a residual > 0 (the group is the "
                             "flushed residual block)")
    token_group = config.group or config.residual
    flush = -(-max(config.residual, token_group) // token_group) * token_group
    return KVGroups(token_group, dim_group, flush)


def _dims(model: KVDims | Any) -> KVDims:
    return model if isinstance(model, KVDims) else model_dims(model)


def kv_bytes_per_token(config: KVConfig | None, model: KVDims | Any, dtype_bytes: int = 2) -> float:
    """Steady-state KV bytes per token of the whole model (batch 1, the full-precision residual not counted).

    ``model``: ``KVDims``, a transformers config or a ``config.json`` mapping; ``config`` None: unquantized at
    ``dtype_bytes`` per value (vLLM's FP8 KV cache: ``dtype_bytes=1``, its per-tensor scales are negligible)."""
    dims = _dims(model)
    if config is None:
        return float(dims.values_per_token * dtype_bytes)
    if config.layer_bits:  # per-layer bits: each layer at its own precision, averaged
        check_layers(config, dims.layers)
        return sum(kv_bytes_per_token(layer_config(config, i), dims, dtype_bytes)
                   for i in range(dims.layers)) / dims.layers
    if config.backend == "hf":
        return dims.values_per_token * (config.bits / 8 + 2 * dtype_bytes / config.group)
    groups = kv_groups(config, dims.head_dim)
    n_meta = 2 if config.fmt == "int" else 1
    bits = config.bits if config.fmt == "int" else 8
    d = dims.head_dim  # per-channel keys: d groups per key_group tokens; per-token: d / key_group groups per token
    per_kv_row = 2 * d * bits / 8 + n_meta * META_BYTES * (d / groups.key_group + d / groups.value_group)
    return dims.layers * dims.kv_heads * per_kv_row


def full_precision_tokens(config: KVConfig | None, head_dim: int) -> int:
    """Most tokens of one sequence held unquantized at any time (worst case): evalsuite's cache keeps
    ``n mod flush``, i.e. up to ``flush - 1``; transformers' QuantizedCache up to ``residual``."""
    if config is None:
        return 0
    if config.backend == "hf":
        return config.residual
    return kv_groups(replace(config, layer_bits=()), head_dim).flush - 1


def kv_bytes_for_length(config: KVConfig | None, model: KVDims | Any, n_tokens: int, batch: int = 1,
                        dtype_bytes: int = 2) -> int:
    """Exact bytes an evalsuite cache holds for ``n_tokens`` tokens: quantized part + full-precision residual.

    The residual is ``n_tokens mod flush`` tokens whatever the prefill/decode split (see ``QuantKVLayer.update``).
    """
    dims = _dims(model)
    full = kv_bytes_per_token(None, dims, dtype_bytes)
    if config is None:
        return int(batch * n_tokens * full)
    if config.backend != "evalsuite":
        raise EvalsuiteError("kv_bytes_for_length: only the evalsuite backend has an exact formula")
    if config.layer_bits:
        check_layers(config, dims.layers)
        return sum(kv_bytes_for_length(layer_config(config, i), dims, n_tokens, batch, dtype_bytes)
                   for i in range(dims.layers)) // dims.layers
    residual = n_tokens % kv_groups(config, dims.head_dim).flush
    quant = kv_bytes_per_token(config, dims, dtype_bytes) * (n_tokens - residual)
    return int(round(batch * (quant + residual * full)))


def kv_bytes_for_context(config: KVConfig | None, model: KVDims | Any, context: int, dtype_bytes: int = 2) -> float:
    """KV bytes of one sequence of ``context`` tokens, worst case: up to ``full_precision_tokens`` unquantized."""
    dims = _dims(model)
    full = kv_bytes_per_token(None, dims, dtype_bytes)
    if config is None:
        return context * full
    recent = min(context, full_precision_tokens(config, dims.head_dim))
    return recent * full + (context - recent) * kv_bytes_per_token(config, dims, dtype_bytes)
