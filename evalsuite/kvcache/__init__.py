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
+ the full-precision residual. Each layer also keeps a dequantized copy of the quantized part, in the same buffer
as the residual, so a decode step writes one token in place and a flush dequantizes only its new block. This copy
is a compute cache (it trades RAM for speed on hardware without fused low-bit attention kernels) and is *not*
counted in ``cache_nbytes``; it never changes the values attention reads. (There is no packed decode path: on any
hardware this cache shows the quality of a quantized cache, not its bandwidth gain.)

Padding: flushes count each row's own tokens (the decoder ``track``s its attention mask), so padding is never part
of a quantization group and a row's K/V do not depend on its batch (``kvcache.layer``). transformers'
QuantizedCache groups batch columns, padding included.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

from evalsuite.kvcache.config import KVConfig

#: loaded on first use (PEP 562): ``kvcache.config`` and ``kvcache.bytes`` (what the planner, the variant grammar
#: and vLLM's server sizing read) import without torch; the cache itself needs it
_LAZY = {**{name: "evalsuite.kvcache.cache" for name in ("QuantKVCache", "cache_nbytes", "make_cache", "plan_for",
                                                          "track_mask")},
         **{name: "evalsuite.kvcache.bytes" for name in ("kv_bytes_for_length", "kv_bytes_per_token", "model_dims")}}

__all__ = ["KVConfig", "QuantKVCache", "cache_nbytes", "kv_bytes_for_length", "kv_bytes_per_token", "make_cache",
           "model_dims", "plan_for", "track_mask"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
