"""evalsuite's own quantized KV cache (a transformers ``Cache``), beside transformers' QuantizedCache.

Storage: flushed tokens are quantized group-wise, append-only (asymmetric int 8/4/2 bits with codes packed into
uint8 bytes and a float16 scale + zero point per group, or FP8 e4m3/e5m2 with a float16 scale per group); keys
per-channel (groups along tokens, KIVI) or per-token, values per-token (groups along head_dim). The newest tokens
stay in full precision (the residual) until a whole block of ``flush`` tokens (the residual size rounded up to key
token-groups) is ready; the block is then quantized once and never re-quantized. A per-channel key group is thus
always complete, whatever the sequence length. After every update the residual holds ``length mod flush`` tokens.

Prefill: ``exact`` lets a call attend to its own tokens in full precision (later calls read them quantized, as
transformers' QuantizedCache does); ``quantized`` returns what is stored, so even a single forward sees the
quantization of all flushed tokens (chunked prefill / prefix caching in serving engines).

Bytes and speed: ``cache_nbytes`` counts what a quantized cache must hold, i.e. packed payload + scales/zero points
+ the full-precision residual. By default (``keep_dequantized=True``) each layer also keeps a dequantized copy of
the quantized part, in the same buffer as the residual, so a decode step writes one token in place and a flush
dequantizes only its new block. This copy is a compute cache (it trades RAM for speed on hardware without fused
low-bit attention kernels) and is *not* counted in ``cache_nbytes``; it never changes the values attention reads.
``make_cache(..., keep_dequantized=False)`` drops it and dequantizes every block at every step (the naive cost).

Left padding: padded positions are quantized like any token, so in batched runs a pad token's key can widen the
range of the per-channel group it falls in (transformers' QuantizedCache behaves the same way).
"""
from evalsuite.kvcache.cache import (QuantKVCache, cache_nbytes, kv_bytes_for_length, kv_bytes_per_token,
                                     make_cache, model_dims, plan_for)
from evalsuite.kvcache.config import KVConfig

__all__ = ["KVConfig", "QuantKVCache", "cache_nbytes", "kv_bytes_for_length", "kv_bytes_per_token", "make_cache",
           "model_dims", "plan_for"]
