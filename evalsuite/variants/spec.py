"""Variant spec grammar: ``WEIGHTS[+KV]``, e.g. ``bf16``, ``w4g64``, ``wf8+kv4g32``, ``kvhf4``.

Weights: ``bf16`` / ``base`` (unquantized, the loaded dtype), ``w8``, ``w4`` (group 128), ``w4gN``,
``w2gN``, ``wf8``. KV: ``kvhf4`` / ``kvhf2`` (transformers QuantizedCache, quanto backend, optional ``gN``/``rN``),
``kv8``/``kv4``/``kv2`` (evalsuite cache, optional ``gN`` group, ``rN`` residual, ``kt`` keys per-token,
``pq`` quantized prefill), ``kvf8e4`` / ``kvf8e5`` (FP8). A spec may be the KV part alone (``kv4g32``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from evalsuite.errors import SpecError
from evalsuite.kvcache.config import KVConfig

VALID_FORMS = (
    "bf16 | base | w8 | w4[gN] | w2[gN] | wf8, optionally +KV where KV is "
    "kv8|kv4|kv2|kvf8e4|kvf8e5 [gN][rN][kt][pq] or kvhf4|kvhf2 [gN][rN]; or KV alone (e.g. w4g64+kv4g32, kv2g32r128)"
)
DEFAULT_EXCLUDE = ("lm_head",)

_W_RE = re.compile(r"^w(?P<bits>8|4|2|f8)(?:g(?P<group>\d+))?$")
_KV_RE = re.compile(
    r"^kv(?P<hf>hf)?(?P<fmt>8|4|2|f8e4|f8e5)(?:g(?P<group>\d+))?(?:r(?P<res>\d+))?(?P<kt>kt)?(?P<pq>pq)?$"
)


@dataclass(frozen=True)
class WeightSpec:
    """Weight quantization: fmt ``none`` (unquantized), ``int`` (bits 8/4/2) or ``float8``."""

    fmt: Literal["none", "int", "float8"] = "none"
    bits: int = 16
    group: int | None = None
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE

    @property
    def name(self) -> str:
        if self.fmt == "none":
            return "bf16"
        if self.fmt == "float8":
            return "wf8"
        return f"w{self.bits}" + (f"g{self.group}" if self.group else "")

    @property
    def bytes_per_param(self) -> float:
        return {"none": 2.0, "float8": 1.0}.get(self.fmt, self.bits / 8)


@dataclass(frozen=True)
class VariantSpec:
    """A variant = {weights, kv cache}; ``name`` is the canonical spec (or the YAML ``name``)."""

    weights: WeightSpec = field(default_factory=WeightSpec)
    kv: KVConfig | None = None
    label: str | None = None

    @property
    def canonical(self) -> str:
        parts = [self.weights.name] if (self.weights.fmt != "none" or self.kv is None) else []
        if self.kv is not None:
            parts.append(self.kv.name)
        return "+".join(parts)

    @property
    def name(self) -> str:
        return self.label or self.canonical

    @property
    def is_baseline(self) -> bool:
        return self.weights.fmt == "none" and self.kv is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "weights": {"fmt": self.weights.fmt, "bits": self.weights.bits, "group": self.weights.group,
                        "exclude": list(self.weights.exclude)},
            "kv": self.kv.to_dict() if self.kv else None,
        }


def _bad(text: str, why: str = "") -> SpecError:
    extra = f" ({why})" if why else ""
    return SpecError(f"bad variant spec {text!r}{extra}; valid forms: {VALID_FORMS}")


def _parse_weights(text: str, part: str) -> WeightSpec:
    if part in ("bf16", "base", "fp16", "fp32", "none"):
        return WeightSpec()
    m = _W_RE.match(part)
    if not m:
        raise _bad(text, f"unknown weight part {part!r}")
    group = int(m["group"]) if m["group"] else None
    if m["bits"] == "f8":
        if group:
            raise _bad(text, "wf8 takes no group size")
        return WeightSpec(fmt="float8", bits=8)
    bits = int(m["bits"])
    if bits == 8 and group:
        raise _bad(text, "w8 is per-channel and takes no group size")
    if bits in (4, 2) and group is None:
        group = 128
    if group is not None and (group < 8 or group & (group - 1)):
        raise _bad(text, f"group {group} must be a power of two >= 8")
    return WeightSpec(fmt="int", bits=bits, group=group)


def _parse_kv(text: str, part: str) -> KVConfig:
    m = _KV_RE.match(part)
    if not m:
        raise _bad(text, f"unknown KV part {part!r}")
    fmt_s = m["fmt"]
    fmt = "int" if fmt_s in ("8", "4", "2") else "fp8" + fmt_s[-2:]
    bits = int(fmt_s) if fmt == "int" else 8
    kw: dict[str, Any] = {"fmt": fmt, "bits": bits}
    if m["group"] is not None:
        kw["group"] = int(m["group"])
    if m["res"] is not None:
        kw["residual"] = int(m["res"])
    if m["kt"]:
        kw["key_axis"] = "token"
    if m["pq"]:
        kw["prefill"] = "quantized"
    if m["hf"]:
        if fmt != "int" or bits not in (2, 4):
            raise _bad(text, "kvhf supports only 2 or 4 bits (transformers QuantizedCache, quanto backend)")
        if m["kt"] or m["pq"]:
            raise _bad(text, "kvhf takes no kt/pq options")
        kw.setdefault("group", 64)
        kw["backend"] = "hf"
    return KVConfig(**kw)


def parse_variant(text: str) -> VariantSpec:
    """Parse one spec string; raises SpecError (one line, lists valid forms) when it does not parse."""
    spec = text.strip().lower()
    parts = [p for p in spec.split("+")]
    if not spec or any(not p for p in parts) or len(parts) > 2:
        raise _bad(text)
    weights, kv = WeightSpec(), None
    for part in parts:
        if part.startswith("kv"):
            if kv is not None:
                raise _bad(text, "two KV parts")
            kv = _parse_kv(text, part)
        elif kv is not None or len(parts) == 2 and part is parts[1]:
            raise _bad(text, "weights come first, then +KV")
        else:
            weights = _parse_weights(text, part)
    return VariantSpec(weights=weights, kv=kv)


def parse_variant_list(text: str) -> list[VariantSpec]:
    """Parse a comma-separated list; duplicates are an error."""
    specs = [parse_variant(t) for t in text.split(",") if t.strip()]
    if not specs:
        raise SpecError(f"no variants given; valid forms: {VALID_FORMS}")
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise SpecError(f"variant listed twice: {', '.join(sorted(dup))}")
    return specs


def variant_from_dict(d: dict[str, Any]) -> VariantSpec:
    """YAML form: ``{name?, spec?, weights: {fmt,bits,group,exclude}, kv: {backend,fmt,bits,...}}``."""
    if not isinstance(d, dict):
        raise SpecError(f"variant entry must be a mapping, got {type(d).__name__}")
    base = parse_variant(d["spec"]) if "spec" in d else VariantSpec()
    try:
        weights = base.weights
        if "weights" in d and d["weights"] is not None:
            w = dict(d["weights"])
            if "exclude" in w:
                w["exclude"] = tuple(w["exclude"])
            weights = replace(weights, **w) if "spec" in d else WeightSpec(**w)
        kv = base.kv
        if "kv" in d:
            kv = None if d["kv"] is None else (replace(kv, **d["kv"]) if kv else KVConfig(**d["kv"]))
    except TypeError as exc:
        raise SpecError(f"bad variant entry {d!r}: {exc}") from None
    spec = VariantSpec(weights=weights, kv=kv, label=d.get("name"))
    _validate(spec)
    return spec


def _validate(spec: VariantSpec) -> None:
    w = spec.weights
    if w.fmt not in ("none", "int", "float8") or (w.fmt == "int" and w.bits not in (8, 4, 2)):
        raise SpecError(f"bad weights {w}; valid forms: {VALID_FORMS}")
    if spec.kv is not None:
        kv = spec.kv
        if kv.fmt not in ("int", "fp8e4", "fp8e5") or (kv.fmt == "int" and kv.bits not in (8, 4, 2)):
            raise SpecError(f"bad kv {kv}; valid forms: {VALID_FORMS}")
        if kv.key_axis not in ("channel", "token") or kv.prefill not in ("exact", "quantized"):
            raise SpecError(f"bad kv {kv}: key_axis is channel|token, prefill is exact|quantized")
