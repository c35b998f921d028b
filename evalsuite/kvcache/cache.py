"""Build KV caches from a ``KVConfig`` and count the bytes they hold (the formula: ``kvcache.bytes``)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer, QuantizedCache, get_layer_types_and_kwargs

from evalsuite.errors import EvalsuiteError
from evalsuite.kvcache.bytes import kv_groups, model_dims
from evalsuite.kvcache.config import KVConfig, check_layers, layer_config
from evalsuite.kvcache.layer import LayerPlan, QuantKVLayer, RowMask


class QuantKVCache(Cache):
    """evalsuite's quantized KV cache: one :class:`QuantKVLayer` per decoder layer (a ``DynamicLayer`` for layers
    kept unquantized by per-layer bits ``[lN=16]``). ``plan`` is the base plan (prefill mode for the decoder).
    The layers share one ``RowMask``: the decoder ``track``s its 2-D attention mask before each forward, so flushes
    count each row's real tokens (``kvcache.layer``)."""

    def __init__(self, config: KVConfig, plan: LayerPlan, num_layers: int,
                 plans: list[LayerPlan | None] | None = None, keep_exact: bool = False) -> None:
        plans = plans if plans is not None else [plan] * num_layers
        self.row_mask = RowMask()
        super().__init__(layers=[QuantKVLayer(p, self.row_mask, keep_exact) if p is not None else DynamicLayer()
                                 for p in plans])
        self.kv_config = config
        self.plan = plan

    def track(self, mask: torch.Tensor | None) -> None:
        """The 2-D attention mask ([batch, columns so far + this call's]) of the next forward or ``update``."""
        self.row_mask.mask = mask

    def flush_sizes(self) -> list[int]:
        """Each quantized layer's flush block (tokens)."""
        return [layer.plan.flush for layer in self.layers if isinstance(layer, QuantKVLayer)]

    def drop_newest(self, drop: torch.Tensor) -> None:
        """The columns ``drop`` marks among the newest ``drop.shape[1]`` hold no token any more (masked holes:
        ``QuantKVLayer.drop_newest``); unquantized layers need only the attention mask."""
        for layer in self.layers:
            if isinstance(layer, QuantKVLayer):
                layer.drop_newest(drop)

    def nbytes(self) -> int:
        return sum(layer.nbytes() if isinstance(layer, QuantKVLayer) else _dynamic_nbytes(layer)
                   for layer in self.layers)


def _dynamic_nbytes(layer: DynamicLayer) -> int:
    if not layer.is_initialized or layer.keys is None:
        return 0
    return layer.keys.numel() * layer.keys.element_size() + layer.values.numel() * layer.values.element_size()


def plan_for(config: KVConfig, head_dim: int) -> LayerPlan:
    """A layer's storage plan: the groups and flush block as ``kvcache.bytes.kv_groups`` resolves them (bad
    combinations raise EvalsuiteError)."""
    groups = kv_groups(config, head_dim)
    return LayerPlan(fmt=config.fmt, bits=config.bits if config.fmt == "int" else 8, key_axis=config.key_axis,
                     key_group=groups.key_group, value_group=groups.value_group, flush=groups.flush,
                     prefill=config.prefill)


def _check_layer_types(model_config: Any, allowed: set[str], backend: str) -> None:
    layer_types, _ = get_layer_types_and_kwargs(model_config.get_text_config(decoder=True))
    other = sorted(set(layer_types) - allowed)
    if other:
        raise EvalsuiteError(f"{backend} KV cache supports {sorted(allowed)} layers only (model has {other})")


def make_cache(config: KVConfig, model_config: Any, keep_exact: bool = False) -> Cache:
    """A fresh cache for one ``generate`` / forward: evalsuite's own, or transformers' QuantizedCache (quanto).

    ``keep_exact`` (evalsuite backend): also keep every token's full-precision K/V (memory for a verification pass
    that rebuilds rows at other lengths); it never changes the values attention reads.
    """
    if config.backend == "hf":
        _check_layer_types(model_config, {"full_attention"}, "hf (transformers QuantizedCache)")
        if config.fmt != "int" or config.bits not in (2, 4) or config.group <= 0:
            raise EvalsuiteError("hf KV cache (quanto) supports int 2/4 bits with a group size > 0")
        return QuantizedCache(backend="quanto", config=model_config, nbits=config.bits, q_group_size=config.group,
                              residual_length=config.residual)
    if config.backend != "evalsuite":
        raise EvalsuiteError(f"KV cache: unknown backend {config.backend!r} (evalsuite, hf)")
    # sliding-window layers keep every token: the model's masks apply the window (exact, but holds more than needed)
    _check_layer_types(model_config, {"full_attention", "sliding_attention"}, "evalsuite")
    layers, _, head_dim = model_dims(model_config)
    base = plan_for(replace(config, layer_bits=()), head_dim)
    if not config.layer_bits:
        return QuantKVCache(config, base, layers, keep_exact=keep_exact)
    check_layers(config, layers)
    plans = [None if (c := layer_config(config, i)) is None else plan_for(c, head_dim) for i in range(layers)]
    return QuantKVCache(config, base, layers, plans, keep_exact=keep_exact)


def track_mask(cache: Any, mask: torch.Tensor | None) -> None:
    """Tell an evalsuite cache the next forward's 2-D attention mask (other caches need no telling)."""
    if isinstance(cache, QuantKVCache):
        cache.track(mask)


def _tensor_bytes(obj: Any, seen: set[int]) -> int:
    """Bytes of the tensors inside ``obj`` (plain, quanto subclass tensors via their inner tensors, tuples)."""
    if isinstance(obj, (tuple, list)):
        return sum(_tensor_bytes(o, seen) for o in obj)
    if not isinstance(obj, torch.Tensor) or id(obj) in seen:
        return 0
    seen.add(id(obj))
    if type(obj) is not torch.Tensor and hasattr(obj, "__tensor_flatten__"):
        names, _ = obj.__tensor_flatten__()
        return sum(_tensor_bytes(getattr(obj, n), seen) for n in names)
    return obj.numel() * obj.element_size()


def cache_nbytes(cache: Cache) -> int:
    """Exact bytes held by a QuantKVCache; for other caches the sum of the K/V tensors their layers hold."""
    if isinstance(cache, QuantKVCache):
        return cache.nbytes()
    seen: set[int] = set()
    total = 0
    for layer in cache.layers:
        for name in ("keys", "values", "_quantized_keys", "_quantized_values"):
            total += _tensor_bytes(getattr(layer, name, None), seen)
    return total
