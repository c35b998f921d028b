"""Measured KV bytes per token: a quantized cache holds fewer than the unquantized one, which holds exactly
2 x layers x kv-heads x head-dim floats per token."""
from __future__ import annotations

from evalsuite.backends.inprocess.kvbytes import measure_kv_bytes_per_token
from evalsuite.kvcache import model_dims
from evalsuite.variants.build import build_variant
from evalsuite.variants.spec import parse_variant


def test_quantized_cache_holds_fewer_bytes_than_bf16(tiny):
    base = build_variant(tiny, parse_variant("bf16"))
    kv4 = build_variant(tiny, parse_variant("kv4g32r8"))
    layers, heads, dim = model_dims(tiny.model.config)
    assert measure_kv_bytes_per_token(base) == 2 * layers * heads * dim * base.float_bytes
    assert measure_kv_bytes_per_token(kv4) < measure_kv_bytes_per_token(base) / 2
