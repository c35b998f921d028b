"""The KV bytes per token a built variant's cache really holds (measured, beside the formula)."""
from __future__ import annotations

from evalsuite.variants.build import BuiltVariant


def measure_kv_bytes_per_token(variant: BuiltVariant, tokens: int = 640) -> float:
    """Bytes the variant's cache actually holds per token after a ``tokens``-long prefill + one decode step.

    The cache is filled through ``update`` with K/V of the model's shapes in the weights' dtype (what a forward
    would write when deployed; the byte count does not depend on the values), so no model forward is spent on it.
    """
    import torch
    from transformers import DynamicCache

    from evalsuite.kvcache import cache_nbytes, model_dims

    cfg = variant.model.config
    cache = variant.make_cache() or DynamicCache(config=cfg)
    layers, heads, dim = model_dims(cfg)
    param = next(variant.model.parameters())
    dtype = {2: torch.bfloat16, 4: torch.float32}.get(variant.float_bytes, param.dtype)
    gen = torch.Generator().manual_seed(0)  # drawn on the CPU, then moved: the same values on every device
    for n in (tokens, 1):
        for i in range(layers):
            k, v = (torch.randn(1, heads, n, dim, generator=gen).to(device=param.device, dtype=dtype)
                    for _ in range(2))
            cache.update(k, v, i)
    return cache_nbytes(cache) / (tokens + 1)
