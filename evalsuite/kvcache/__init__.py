"""evalsuite's own quantized KV cache (a transformers ``Cache``), beside transformers' QuantizedCache."""
from evalsuite.kvcache.config import KVConfig

__all__ = ["KVConfig"]
