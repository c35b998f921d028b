"""KV-cache quantization settings: what a variant's `+kv...` part parses into."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
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
    layer_bits: per-layer overrides ``(first, last, bits)`` (inclusive layer range; bits 8/4/2 = int at the same
    group/residual/axis, 16 = that layer's cache unquantized), spec form ``kv4g32[l0-1=8;l29=16]``.
    """

    backend: KVBackend = "evalsuite"
    fmt: KVFormat = "int"
    bits: int = 8
    group: int = 32
    residual: int = 128
    key_axis: Literal["channel", "token"] = "channel"
    prefill: Literal["exact", "quantized"] = "exact"
    layer_bits: tuple[tuple[int, int, int], ...] = ()

    def __post_init__(self) -> None:  # JSON/YAML give lists: normalize so equal configs compare equal
        object.__setattr__(self, "layer_bits", tuple(tuple(int(x) for x in r) for r in self.layer_bits))

    @property
    def name(self) -> str:
        """Canonical spec string, e.g. ``kv4g32r128`` (defaults for axis/prefill omitted)."""
        if self.backend == "hf":
            return f"kvhf{self.bits}g{self.group}r{self.residual}"
        head = f"kv{self.bits}" if self.fmt == "int" else f"kvf8{self.fmt[-2:]}"
        tail = "" if self.key_axis == "channel" else "kt"
        tail += "" if self.prefill == "exact" else "pq"
        return f"{head}g{self.group}r{self.residual}{tail}{self.options}"

    @property
    def options(self) -> str:
        """The per-layer part of the name, e.g. ``[l0-1=8;l29=16]`` ("" without overrides)."""
        if not self.layer_bits:
            return ""
        items = [f"l{a}={b}" if a == z else f"l{a}-{z}={b}" for a, z, b in self.layer_bits]
        return "[" + ";".join(items) + "]"

    def bits_of(self, layer: int) -> int | None:
        """Override bits of ``layer`` (16 = unquantized), or None when the layer uses the base format."""
        for a, z, b in self.layer_bits:
            if a <= layer <= z:
                return b
        return None

    def to_dict(self) -> dict:
        return asdict(self)


def layer_config(config: KVConfig | None, layer: int) -> KVConfig | None:
    """The plain (override-free) config of one layer: None when that layer's cache is unquantized (bits 16)."""
    if config is None:
        return None
    bits = config.bits_of(layer)
    if bits == 16:
        return None
    if bits is None:
        return replace(config, layer_bits=())
    return replace(config, fmt="int", bits=bits, layer_bits=())


def check_layers(config: KVConfig, num_layers: int) -> None:
    """Per-layer ranges must name existing layers."""
    from evalsuite.errors import EvalsuiteError

    bad = [f"l{a}-{z}" for a, z, _ in config.layer_bits if z >= num_layers]
    if bad:
        raise EvalsuiteError(f"{config.name}: layer range {bad[0]} is past the model's {num_layers} layers")
