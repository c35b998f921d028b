"""In-process variants from spec strings and YAML entries (``WEIGHTS[+KV]``, e.g. ``bf16``, ``w4g64``,
``wf8+kv4g32``, ``kvhf4``, ``w4g128[keep=l0]``; or ``ckpt:PATH[+KV][#NAME]``).

The grammar itself is ``grammar.py`` (entry point, prefixes) and ``quant_grammar.py`` (weights and KV forms);
this module turns what it parses into ``VariantSpec`` records (``forms.py``) and refuses the kinds that only a
server runs (``openai:``, ``vllm:``, vLLM's ``vkvf8``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from evalsuite.errors import SpecError
from evalsuite.kvcache.config import KVConfig
from evalsuite.variants.artifact import artifact_variant, check_artifact_spec
from evalsuite.variants.forms import VariantSpec, WeightSpec
from evalsuite.variants.grammar import CheckpointRef, parse_spec, spec_kind, split_specs
from evalsuite.variants.quant_grammar import VALID_FORMS, QuantForm, VllmKV, bad, parse_layer_bits, parse_overrides

__all__ = ["VariantSpec", "WeightSpec", "parse_variant", "parse_variant_list", "split_specs", "variant_from_dict"]


def parse_variant(text: str) -> VariantSpec:
    """Parse one spec string; raises SpecError (one line, lists valid forms) when it does not parse."""
    kind = spec_kind(text)
    if kind in ("openai", "vllm"):
        raise bad(text, f"{kind}: specs are served variants, not built in-process")
    parsed = parse_spec(text)
    if isinstance(parsed, CheckpointRef):
        return artifact_variant(parsed, text)
    assert isinstance(parsed, QuantForm)  # openai: / vllm: are refused above
    if isinstance(parsed.kv, VllmKV):
        raise bad(text, f"{parsed.kv.name} is vLLM's KV cache: serve it with --engine vllm")
    return VariantSpec(weights=parsed.weights, kv=parsed.kv)


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
    w["overrides"] = parse_overrides(f"[{opts}]", opts.lower()) if opts else ()
    return w


def _yaml_kv(kv: dict[str, Any]) -> dict[str, Any]:
    """YAML KV: ``layers: {"0-1": 8, 29: 16}`` becomes ``layer_bits``."""
    layers = kv.pop("layers", None)
    if layers:
        opts = ";".join(f"l{k}={v}" for k, v in dict(layers).items())
        kv["layer_bits"] = parse_layer_bits(f"layers: {layers}", opts)
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
