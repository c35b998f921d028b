"""The parsed in-process variant: ``WeightSpec`` (weights) and ``VariantSpec`` (weights + KV cache, or a ``ckpt:``
artifact). Plain frozen records: no parsing (``grammar.py`` builds them), no torch code."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Sequence

from evalsuite.kvcache.config import KVConfig

DEFAULT_EXCLUDE = ("lm_head",)


@dataclass(frozen=True)
class WeightSpec:
    """Weight quantization: fmt ``none`` (unquantized), ``int`` (bits 8/4/2) or ``float8``."""

    fmt: Literal["none", "int", "float8"] = "none"
    bits: int = 16
    group: int | None = None
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    #: mixed precision: (``keep`` or a weight form such as ``w8``, module patterns), first match wins
    overrides: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: activations quantized too (``w8a8``, ``w4a8``, ``wf8af8``): ``int8`` / ``float8``, calibrated on
    #: ``calib`` shipped passages (None = ``activations.DEFAULT_CALIB``)
    activations: Literal["none", "int8", "float8"] = "none"
    calib: int | None = None

    def __post_init__(self) -> None:  # JSON/YAML give lists: normalize so equal specs compare equal
        object.__setattr__(self, "overrides", tuple((k, tuple(p)) for k, p in self.overrides))

    @property
    def base_name(self) -> str:
        if self.fmt == "none":
            return "bf16"
        if self.fmt == "float8":
            return "wf8" + self.act_suffix
        return f"w{self.bits}" + (f"g{self.group}" if self.group else "") + self.act_suffix

    @property
    def act_suffix(self) -> str:
        """``a8`` / ``af8`` (+ ``cN``) for quantized activations, else empty."""
        if self.activations == "none":
            return ""
        return ("a8" if self.activations == "int8" else "af8") + (f"c{self.calib}" if self.calib else "")

    @property
    def name(self) -> str:
        if not self.overrides:
            return self.base_name
        return self.base_name + "[" + ";".join(f"{k}={','.join(p)}" for k, p in self.overrides) + "]"

    def with_keep(self, patterns: Sequence[str]) -> WeightSpec:
        """This spec with ``patterns`` added to a leading ``keep=`` option (no-op for an empty list)."""
        if not patterns:
            return self
        rest = [(k, p) for k, p in self.overrides if k != "keep"]
        old = next((p for k, p in self.overrides if k == "keep"), ())
        return replace(self, overrides=(("keep", tuple(old) + tuple(patterns)), *rest))

    @property
    def bytes_per_param(self) -> float:
        return {"none": 2.0, "float8": 1.0}.get(self.fmt, self.bits / 8)


def artifact_name(path: str, kv: KVConfig | None) -> str:
    """Default name: the folder / file stem, characters outside ``A-Za-z0-9_.-`` replaced, ``+KV`` appended."""
    stem = re.sub(r"[^A-Za-z0-9_.\-]+", "-", Path(path).stem).strip("-.") or "artifact"
    return stem + (f"+{kv.name}" if kv is not None else "")


@dataclass(frozen=True)
class VariantSpec:
    """A variant = {weights, kv cache}; ``name`` is the canonical spec (or the YAML ``name``)."""

    weights: WeightSpec = field(default_factory=WeightSpec)
    kv: KVConfig | None = None
    label: str | None = None
    #: ``ckpt:PATH``: an absolute model folder or .gguf path whose weights replace the baseline's (``artifact.py``)
    artifact: str | None = None

    @property
    def canonical(self) -> str:
        if self.artifact is not None:
            return artifact_name(self.artifact, self.kv)
        parts = [self.weights.name] if (self.weights.fmt != "none" or self.kv is None) else []
        if self.kv is not None:
            parts.append(self.kv.name)
        return "+".join(parts)

    @property
    def name(self) -> str:
        return self.label or self.canonical

    @property
    def is_baseline(self) -> bool:
        return self.weights.fmt == "none" and self.kv is None and self.artifact is None

    def to_dict(self) -> dict[str, Any]:
        extra = {"artifact": self.artifact} if self.artifact is not None else {}
        return {**extra,
            "name": self.name,
            "weights": {"fmt": self.weights.fmt, "bits": self.weights.bits, "group": self.weights.group,
                        "exclude": list(self.weights.exclude),
                        "overrides": [[k, list(p)] for k, p in self.weights.overrides],
                        **({"activations": self.weights.activations, "calib": self.weights.calib}
                           if self.weights.activations != "none" else {})},
            "kv": self.kv.to_dict() if self.kv else None,
        }
