"""The ``WEIGHTS[+KV]`` part of the variant grammar (``grammar.py`` is the entry point and owns the prefixes).

Weights: ``bf16`` / ``base`` (unquantized, the loaded dtype), ``w8``, ``w4`` (group 128), ``w4gN``,
``w2gN``, ``wf8``. KV: ``kvhf4`` / ``kvhf2`` (transformers QuantizedCache, quanto backend, optional ``gN``/``rN``),
``kv8``/``kv4``/``kv2`` (evalsuite cache, optional ``gN`` group, ``rN`` residual, ``kt`` keys per-token,
``pq`` quantized prefill), ``kvf8e4`` / ``kvf8e5`` (FP8), or vLLM's own FP8 cache ``vkvf8`` / ``vkvf8e4`` /
``vkvf8e5`` (``--engine vllm`` only). A spec may be the KV part alone (``kv4g32``).

Activations (W8A8): ``a8`` (int8) or ``af8`` (float8) after a weight form, ``cN`` calibration passages:
``w8a8``, ``w4g64a8``, ``wf8af8``, ``w8a8c64``.

Mixed precision (``docs/sensitivity.md``): weights take ``[OPTION;OPTION]`` where an option is ``keep=PATTERNS``
(those modules stay unquantized) or ``FORM=PATTERNS`` with a weight form (``w8=*.down_proj``, ``w4g32=l0-1``);
patterns are comma-separated module globs, ``lN`` / ``lA-B`` = decoder layer(s). KV takes per-layer bits
``[lA-B=BITS;...]`` with BITS 8/4/2, or 16 for an unquantized layer: ``w4g128[keep=l0,l29.mlp]+kv4g32[l0-1=8]``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from evalsuite.errors import SpecError
from evalsuite.kvcache.config import KVConfig
from evalsuite.variants.forms import WeightSpec

VALID_FORMS = (
    "bf16 | base | w8 | w4[gN] | w2[gN] | wf8 [a8|af8 activations][cN calibration] [keep=PATS;w8=PATS], optionally +KV where KV is "
    "kv8|kv4|kv2|kvf8e4|kvf8e5 [gN][rN][kt][pq][lA-B=8|4|2|16] or kvhf4|kvhf2 [gN][rN]; or KV alone "
    "(e.g. w4g64+kv4g32, w4g128[keep=l0,l29.mlp], kv4g32[l0-1=8]); or ckpt:PATH[+KV][#NAME] (a model folder "
    "or .gguf file)"
)
#: vLLM's FP8 KV cache spellings -> ``--kv-cache-dtype``
VLLM_KV = {"vkvf8": "fp8", "vkvf8e4": "fp8_e4m3", "vkvf8e5": "fp8_e5m2"}
BASELINE_WORDS = ("bf16", "base", "fp16", "fp32", "none")
#: a mixed-precision module pattern
PATTERN_RE = re.compile(r"^[a-z0-9_.*?-]+$")

_W_RE = re.compile(r"^w(?P<bits>8|4|2|f8)(?:g(?P<group>\d+))?(?:a(?P<act>8|f8)(?:c(?P<calib>\d+))?)?$")
_KV_RE = re.compile(
    r"^kv(?P<hf>hf)?(?P<fmt>8|4|2|f8e4|f8e5)(?:g(?P<group>\d+))?(?:r(?P<res>\d+))?(?P<kt>kt)?(?P<pq>pq)?$"
)
_OPTS_RE = re.compile(r"^(?P<head>[^\[\]]+)(?:\[(?P<opts>[^\[\]]*)\])?$")
_KV_OPT_RE = re.compile(r"^l(\d+)(?:-(\d+))?=(8|4|2|16)$")


@dataclass(frozen=True)
class VllmKV:
    """vLLM's own FP8 KV cache (``vkvf8``, ``vkvf8e4``, ``vkvf8e5``): per-tensor scales, no residual."""

    name: str

    @property
    def dtype(self) -> str:
        """The ``--kv-cache-dtype`` value."""
        return VLLM_KV[self.name]


@dataclass(frozen=True)
class QuantForm:
    """``WEIGHTS[+KV]``: weights plus an evalsuite KV cache (``KVConfig``), vLLM's (``VllmKV``) or none."""

    weights: WeightSpec
    kv: KVConfig | VllmKV | None = None


def bad(text: str, why: str = "") -> SpecError:
    """The one-line error for a spec that does not parse (lists the valid forms)."""
    extra = f" ({why})" if why else ""
    return SpecError(f"bad variant spec {text!r}{extra}; valid forms: {VALID_FORMS}")


def override_spec(key: str) -> WeightSpec | None:
    """The precision an option key stands for: None for ``keep``, else the weight form it names."""
    return None if key == "keep" else parse_weights(key, key)


def parse_overrides(text: str, opts: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``keep=PATS;w8=PATS`` -> ((key, patterns), ...), keys canonical (``keep`` or a weight form's name)."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for item in opts.split(";"):
        key, eq, pats = item.strip().partition("=")
        patterns = tuple(p.strip() for p in pats.split(","))
        if not eq or not key or not all(patterns):
            raise bad(text, f"option {item.strip()!r} is not keep=PATTERNS or FORM=PATTERNS")
        wrong = [p for p in patterns if not PATTERN_RE.match(p)]
        if wrong:
            raise bad(text, f"pattern {wrong[0]!r} may hold only a-z 0-9 _ . * ? -")
        if key in ("bf16", "base", "none"):
            key = "keep"
        if key != "keep":
            form = parse_weights(text, key)
            if form.fmt == "none" or form.overrides or form.activations != "none":
                raise bad(text, f"option key {key!r} must be keep or a weight form (w8, w4g32, wf8)")
            key = form.name
        if key in [k for k, _ in out]:
            raise bad(text, f"option {key!r} given twice")
        out.append((key, patterns))
    return tuple(out)


def _options(part: str) -> tuple[str, str] | None:
    """(head, options) of ``HEAD[OPTIONS]``, or None when ``part`` has no ``[...]``."""
    m = _OPTS_RE.match(part)
    return (m["head"], m["opts"]) if m and m["opts"] is not None else None


def parse_weights(text: str, part: str) -> WeightSpec:
    """One weights part (``w4g64``, ``wf8af8``, ``w4g128[keep=l0]``, ``bf16``)."""
    split = _options(part)
    if split:
        head, opts = split
        base = parse_weights(text, head)
        if base.fmt == "none":
            raise bad(text, "mixed-precision options need a quantized base (e.g. w4g64[keep=l0])")
        if base.activations != "none":
            raise bad(text, "mixed-precision options do not combine with quantized activations")
        if not opts.strip():
            raise bad(text, "empty [] options")
        return replace(base, overrides=parse_overrides(text, opts))
    if part in BASELINE_WORDS:
        return WeightSpec()
    m = _W_RE.match(part)
    if not m:
        raise bad(text, f"unknown weight part {part!r}")
    group = int(m["group"]) if m["group"] else None
    act = {None: "none", "8": "int8", "f8": "float8"}[m["act"]]
    calib = int(m["calib"]) if m["calib"] else None
    if calib is not None and not 1 <= calib <= 4096:
        raise bad(text, "calibration size cN must be 1..4096 passages")
    if m["bits"] == "f8":
        if group:
            raise bad(text, "wf8 takes no group size")
        return WeightSpec(fmt="float8", bits=8, activations=act, calib=calib)
    bits = int(m["bits"])
    if bits == 8 and group:
        raise bad(text, "w8 is per-channel and takes no group size")
    if bits in (4, 2) and group is None:
        group = 128
    if group is not None and (group < 8 or group & (group - 1)):
        raise bad(text, f"group {group} must be a power of two >= 8")
    return WeightSpec(fmt="int", bits=bits, group=group, activations=act, calib=calib)


def parse_layer_bits(text: str, opts: str) -> tuple[tuple[int, int, int], ...]:
    """``l0-1=8;l3=16`` -> ((first, last, bits), ...), ranges ordered and disjoint."""
    out: list[tuple[int, int, int]] = []
    for item in opts.split(";"):
        m = _KV_OPT_RE.match(item.strip())
        if not m:
            raise bad(text, f"KV option {item.strip()!r} is not lN=BITS or lA-B=BITS (BITS 8, 4, 2 or 16)")
        lo, hi = int(m[1]), int(m[2] if m[2] is not None else m[1])
        if hi < lo or any(a <= hi and lo <= z for a, z, _ in out):
            raise bad(text, f"KV layer range {item.strip()!r} is reversed or overlaps another")
        out.append((lo, hi, int(m[3])))
    return tuple(out)


def parse_kv(text: str, part: str) -> KVConfig:
    """One evalsuite KV part (``kv4g32r128``, ``kvhf4``, ``kvf8e4``, ``kv4[l0-1=8]``)."""
    split = _options(part)
    if split:
        base = parse_kv(text, split[0])
        if base.backend == "hf":
            raise bad(text, "per-layer KV bits need evalsuite's cache (not kvhf)")
        return replace(base, layer_bits=parse_layer_bits(text, split[1]))
    m = _KV_RE.match(part)
    if not m:
        raise bad(text, f"unknown KV part {part!r}")
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
            raise bad(text, "kvhf supports only 2 or 4 bits (transformers QuantizedCache, quanto backend)")
        if m["kt"] or m["pq"]:
            raise bad(text, "kvhf takes no kt/pq options")
        kw.setdefault("group", 64)
        kw["backend"] = "hf"
    return KVConfig(**kw)


def parse_any_kv(text: str, part: str) -> KVConfig | VllmKV:
    """A KV part of either cache: vLLM's (``vkv...``) or evalsuite's (``kv...``)."""
    if not part.startswith("vkv"):
        return parse_kv(text, part)
    if part not in VLLM_KV:
        raise bad(text, f"unknown vLLM KV part {part!r} (vkvf8, vkvf8e4 or vkvf8e5)")
    return VllmKV(part)


def parse_quant(text: str) -> QuantForm:
    """``WEIGHTS[+KV]`` or ``KV`` alone (case-insensitive); raises SpecError (one line) when it does not parse."""
    spec = text.strip().lower()
    parts = spec.split("+")
    if not spec or any(not p for p in parts) or len(parts) > 2:
        raise bad(text)
    weights, kv = WeightSpec(), None
    for part in parts:
        if part.startswith(("kv", "vkv")):
            if kv is not None:
                raise bad(text, "two KV parts")
            kv = parse_any_kv(text, part)
        elif kv is not None or len(parts) == 2 and part is parts[1]:
            raise bad(text, "weights come first, then +KV")
        else:
            weights = parse_weights(text, part)
    return QuantForm(weights=weights, kv=kv)
