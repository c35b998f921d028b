"""KV-cache quantization settings: what a variant's `+kv...` part parses into."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

KVBackend = Literal["evalsuite", "hf"]
KVFormat = Literal["int", "fp8e4", "fp8e5"]


@dataclass(frozen=True)
class KVConfig:
    """How keys and values are stored.

    backend: ``evalsuite`` (this package's cache) or ``hf`` (transformers' QuantizedCache, quanto backend).
    fmt/bits: asymmetric integer at 8/4/2 bits, or FP8 (e4m3 / e5m2, bits=8) with scales.
    group: group size along the quantized axis; 0 means the whole axis (whole channel / whole head dim).
    residual: the most recent ``residual`` tokens stay in full precision.
    key_axis: keys quantized per-channel (KIVI) or per-token; values are always per-token.
    prefill: ``exact`` (the prompt attends to full-precision K/V) or ``quantized`` (it reads quantized K/V).
    """

    backend: KVBackend = "evalsuite"
    fmt: KVFormat = "int"
    bits: int = 8
    group: int = 32
    residual: int = 128
    key_axis: Literal["channel", "token"] = "channel"
    prefill: Literal["exact", "quantized"] = "exact"

    @property
    def name(self) -> str:
        """Canonical spec string, e.g. ``kv4g32r128`` (defaults for axis/prefill omitted)."""
        if self.backend == "hf":
            return f"kvhf{self.bits}g{self.group}r{self.residual}"
        head = f"kv{self.bits}" if self.fmt == "int" else f"kvf8{self.fmt[-2:]}"
        tail = "" if self.key_axis == "channel" else "kt"
        tail += "" if self.prefill == "exact" else "pq"
        return f"{head}g{self.group}r{self.residual}{tail}"

    def to_dict(self) -> dict:
        return asdict(self)
