"""Variant spec grammar: ``WEIGHTS[+KV]``, e.g. ``bf16``, ``w4g64``, ``wf8+kv4g32``, ``kvhf4``.

Weights: ``bf16`` / ``base`` (unquantized, the loaded dtype), ``w8``, ``w4`` (group 128), ``w4gN``,
``w2gN``, ``wf8``. KV: ``kvhf4`` / ``kvhf2`` (transformers QuantizedCache, quanto backend, optional ``gN``/``rN``),
``kv8``/``kv4``/``kv2`` (evalsuite cache, optional ``gN`` group, ``rN`` residual, ``kt`` keys per-token,
``pq`` quantized prefill), ``kvf8e4`` / ``kvf8e5`` (FP8). A spec may be the KV part alone (``kv4g32``).

Activations (W8A8): ``a8`` (int8) or ``af8`` (float8) after a weight form, ``cN`` calibration passages:
``w8a8``, ``w4g64a8``, ``wf8af8``, ``w8a8c64``.

Mixed precision (``docs/sensitivity.md``): weights take ``[OPTION;OPTION]`` where an option is ``keep=PATTERNS``
(those modules stay unquantized) or ``FORM=PATTERNS`` with a weight form (``w8=*.down_proj``, ``w4g32=l0-1``);
patterns are comma-separated module globs, ``lN`` / ``lA-B`` = decoder layer(s). KV takes per-layer bits
``[lA-B=BITS;...]`` with BITS 8/4/2, or 16 for an unquantized layer: ``w4g128[keep=l0,l29.mlp]+kv4g32[l0-1=8]``.

Artifacts (``evalsuite/variants/artifact.py``): ``ckpt:PATH[+KV][#NAME]``, a model folder or a ``.gguf`` file.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Sequence

from evalsuite.errors import SpecError
from evalsuite.kvcache.config import KVConfig

VALID_FORMS = (
    "bf16 | base | w8 | w4[gN] | w2[gN] | wf8 [a8|af8 activations][cN calibration] [keep=PATS;w8=PATS], optionally +KV where KV is "
    "kv8|kv4|kv2|kvf8e4|kvf8e5 [gN][rN][kt][pq][lA-B=8|4|2|16] or kvhf4|kvhf2 [gN][rN]; or KV alone "
    "(e.g. w4g64+kv4g32, w4g128[keep=l0,l29.mlp], kv4g32[l0-1=8]); or ckpt:PATH[+KV][#NAME] (a model folder "
    "or .gguf file)"
)
DEFAULT_EXCLUDE = ("lm_head",)

_W_RE = re.compile(r"^w(?P<bits>8|4|2|f8)(?:g(?P<group>\d+))?(?:a(?P<act>8|f8)(?:c(?P<calib>\d+))?)?$")
_KV_RE = re.compile(
    r"^kv(?P<hf>hf)?(?P<fmt>8|4|2|f8e4|f8e5)(?:g(?P<group>\d+))?(?:r(?P<res>\d+))?(?P<kt>kt)?(?P<pq>pq)?$"
)
_OPTS_RE = re.compile(r"^(?P<head>[^\[\]]+)(?:\[(?P<opts>[^\[\]]*)\])?$")
_KV_OPT_RE = re.compile(r"^l(\d+)(?:-(\d+))?=(8|4|2|16)$")


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
            from evalsuite.variants.artifact import artifact_name

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


def _bad(text: str, why: str = "") -> SpecError:
    extra = f" ({why})" if why else ""
    return SpecError(f"bad variant spec {text!r}{extra}; valid forms: {VALID_FORMS}")


def override_spec(key: str) -> WeightSpec | None:
    """The precision an option key stands for: None for ``keep``, else the weight form it names."""
    return None if key == "keep" else _parse_weights(key, key)


def _parse_overrides(text: str, opts: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    from evalsuite.variants.mixed import PATTERN_RE

    out: list[tuple[str, tuple[str, ...]]] = []
    for item in opts.split(";"):
        key, eq, pats = item.strip().partition("=")
        patterns = tuple(p.strip() for p in pats.split(","))
        if not eq or not key or not all(patterns):
            raise _bad(text, f"option {item.strip()!r} is not keep=PATTERNS or FORM=PATTERNS")
        bad = [p for p in patterns if not PATTERN_RE.match(p)]
        if bad:
            raise _bad(text, f"pattern {bad[0]!r} may hold only a-z 0-9 _ . * ? -")
        if key in ("bf16", "base", "none"):
            key = "keep"
        if key != "keep":
            form = _parse_weights(text, key)
            if form.fmt == "none" or form.overrides or form.activations != "none":
                raise _bad(text, f"option key {key!r} must be keep or a weight form (w8, w4g32, wf8)")
            key = form.name
        if key in [k for k, _ in out]:
            raise _bad(text, f"option {key!r} given twice")
        out.append((key, patterns))
    return tuple(out)


def _parse_weights(text: str, part: str) -> WeightSpec:
    m_opts = _OPTS_RE.match(part)
    if m_opts and m_opts["opts"] is not None:
        base = _parse_weights(text, m_opts["head"])
        if base.fmt == "none":
            raise _bad(text, "mixed-precision options need a quantized base (e.g. w4g64[keep=l0])")
        if base.activations != "none":
            raise _bad(text, "mixed-precision options do not combine with quantized activations")
        if not m_opts["opts"].strip():
            raise _bad(text, "empty [] options")
        return replace(base, overrides=_parse_overrides(text, m_opts["opts"]))
    if part in ("bf16", "base", "fp16", "fp32", "none"):
        return WeightSpec()
    m = _W_RE.match(part)
    if not m:
        raise _bad(text, f"unknown weight part {part!r}")
    group = int(m["group"]) if m["group"] else None
    act = {None: "none", "8": "int8", "f8": "float8"}[m["act"]]
    calib = int(m["calib"]) if m["calib"] else None
    if calib is not None and not 1 <= calib <= 4096:
        raise _bad(text, "calibration size cN must be 1..4096 passages")
    if m["bits"] == "f8":
        if group:
            raise _bad(text, "wf8 takes no group size")
        return WeightSpec(fmt="float8", bits=8, activations=act, calib=calib)
    bits = int(m["bits"])
    if bits == 8 and group:
        raise _bad(text, "w8 is per-channel and takes no group size")
    if bits in (4, 2) and group is None:
        group = 128
    if group is not None and (group < 8 or group & (group - 1)):
        raise _bad(text, f"group {group} must be a power of two >= 8")
    return WeightSpec(fmt="int", bits=bits, group=group, activations=act, calib=calib)


def _parse_layer_bits(text: str, opts: str) -> tuple[tuple[int, int, int], ...]:
    out: list[tuple[int, int, int]] = []
    for item in opts.split(";"):
        m = _KV_OPT_RE.match(item.strip())
        if not m:
            raise _bad(text, f"KV option {item.strip()!r} is not lN=BITS or lA-B=BITS (BITS 8, 4, 2 or 16)")
        lo, hi = int(m[1]), int(m[2] if m[2] is not None else m[1])
        if hi < lo or any(a <= hi and lo <= z for a, z, _ in out):
            raise _bad(text, f"KV layer range {item.strip()!r} is reversed or overlaps another")
        out.append((lo, hi, int(m[3])))
    return tuple(out)


def _parse_kv(text: str, part: str) -> KVConfig:
    m_opts = _OPTS_RE.match(part)
    if m_opts and m_opts["opts"] is not None:
        base = _parse_kv(text, m_opts["head"])
        if base.backend == "hf":
            raise _bad(text, "per-layer KV bits need evalsuite's cache (not kvhf)")
        return replace(base, layer_bits=_parse_layer_bits(text, m_opts["opts"]))
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
    if text.strip().lower().startswith("ckpt:"):
        from evalsuite.variants.artifact import parse_artifact

        return parse_artifact(text)
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


def split_specs(text: str) -> list[str]:
    """Split a comma-separated list of specs, leaving commas inside ``[...]`` alone."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [t.strip() for t in out + [cur] if t.strip()]


def parse_variant_list(text: str) -> list[VariantSpec]:
    """Parse a comma-separated list; duplicates are an error."""
    specs = [parse_variant(t) for t in split_specs(text)]
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
            w = _yaml_weights(dict(d["weights"]))
            weights = replace(weights, **w) if "spec" in d else WeightSpec(**w)
        kv = base.kv
        if "kv" in d:
            kvd = None if d["kv"] is None else _yaml_kv(dict(d["kv"]))
            kv = None if kvd is None else (replace(kv, **kvd) if kv else KVConfig(**kvd))
    except TypeError as exc:
        raise SpecError(f"bad variant entry {d!r}: {exc}") from None
    artifact = d.get("artifact", base.artifact)
    spec = VariantSpec(weights=weights, kv=kv, label=d.get("name") or base.label, artifact=artifact)
    _validate(spec)
    if artifact is not None:
        from evalsuite.variants.artifact import check_artifact_spec

        check_artifact_spec(spec)
    return spec


def _yaml_weights(w: dict[str, Any]) -> dict[str, Any]:
    """YAML weights: ``keep: [PATTERN, ...]`` and ``overrides: {w8: [PATTERN, ...]}`` become ``overrides``."""
    if "exclude" in w:
        w["exclude"] = tuple(w["exclude"])
    keep, extra = w.pop("keep", None), w.pop("overrides", None)
    if keep is None and extra is None:
        return w
    items = ([("keep", list(keep))] if keep else []) + list((extra or {}).items() if isinstance(extra, dict)
                                                            else extra or [])
    opts = ";".join(f"{k}={','.join(str(p) for p in (v if isinstance(v, list) else [v]))}" for k, v in items)
    w["overrides"] = _parse_overrides(f"[{opts}]", opts.lower()) if opts else ()
    return w


def _yaml_kv(kv: dict[str, Any]) -> dict[str, Any]:
    """YAML KV: ``layers: {"0-1": 8, 29: 16}`` becomes ``layer_bits``."""
    layers = kv.pop("layers", None)
    if layers:
        opts = ";".join(f"l{k}={v}" for k, v in dict(layers).items())
        kv["layer_bits"] = _parse_layer_bits(f"layers: {layers}", opts)
    return kv


def _validate(spec: VariantSpec) -> None:
    w = spec.weights
    if w.fmt not in ("none", "int", "float8") or (w.fmt == "int" and w.bits not in (8, 4, 2)):
        raise SpecError(f"bad weights {w}; valid forms: {VALID_FORMS}")
    if w.activations not in ("none", "int8", "float8") or (w.activations != "none" and (w.fmt == "none" or
                                                                                       w.overrides)):
        raise SpecError(f"bad activations {w.activations!r}: int8 or float8, on quantized weights without [...]")
    if spec.kv is not None:
        kv = spec.kv
        if kv.fmt not in ("int", "fp8e4", "fp8e5") or (kv.fmt == "int" and kv.bits not in (8, 4, 2)):
            raise SpecError(f"bad kv {kv}; valid forms: {VALID_FORMS}")
        if kv.key_axis not in ("channel", "token") or kv.prefill not in ("exact", "quantized"):
            raise SpecError(f"bad kv {kv}: key_axis is channel|token, prefill is exact|quantized")
        if kv.layer_bits and kv.backend == "hf":
            raise SpecError("per-layer KV bits need evalsuite's cache (not the hf backend)")
    if w.overrides and w.fmt == "none":
        raise SpecError("mixed-precision options need a quantized weight format")
