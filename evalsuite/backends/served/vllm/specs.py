"""Variant specs as vLLM server flags (``--engine vllm``).

A served variant is one vLLM server: the model it serves plus its flags. The mapping:

| spec | server |
|---|---|
| ``bf16`` / ``base`` | the baseline: the model folder, ``--dtype bfloat16`` |
| ``vkvf8`` | vLLM's FP8 KV cache, ``--kv-cache-dtype fp8`` (per-tensor scales, no full-precision residual) |
| ``wf8`` | ``--quantization fp8`` (vLLM's dynamic FP8 weights, where the device has it) |
| ``ckpt:PATH[#name]`` | ``--model PATH`` (a local model folder: what ships, e.g. compressed-tensors) |
| ``vllm:"ARGS"#name`` | the baseline's server plus raw flags ARGS (``#name`` required) |

``+vkvf8`` combines with ``wf8`` and ``ckpt:``. vLLM's FP8 KV cache is *not* evalsuite's ``kvf8e4`` (grouped scales
and a full-precision residual in transformers), hence its own spelling; the report names the scheme (``kv_scheme``).
Anything vLLM cannot serve (evalsuite's own KV caches, optimum-quanto weight groups, GGUF files) is refused with one
line before any server starts. The strings are parsed by the variant grammar (``evalsuite/variants/grammar.py``);
this module only maps what it parses to server flags.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from evalsuite.errors import EvalsuiteError, SpecError
from evalsuite.kvcache.config import KVConfig
from evalsuite.variants.grammar import CheckpointRef, VllmArgs, flag_values, parse_spec, spec_kind
from evalsuite.variants.quant_grammar import QuantForm, VllmKV

BASELINE_ALIASES = ("bf16", "base")  # fp16 / fp32 / none are not vLLM's (bf16) baseline
VKV = {"vkvf8": "vLLM fp8 KV cache (fp8_e4m3, per-tensor scale, no residual)",
       "vkvf8e4": "vLLM fp8_e4m3 KV cache (per-tensor scale, no residual)",
       "vkvf8e5": "vLLM fp8_e5m2 KV cache (no scale, no residual)"}
BASE_KV = "vLLM bf16 KV cache (unquantized)"
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_OWN_KV = ("it is evalsuite's own KV cache (grouped scales, a full-precision residual) in transformers; vLLM's FP8 "
           "KV cache is spelt 'vkvf8' (or vkvf8e4 / vkvf8e5), and vLLM has no int4/int2 KV cache")
_QUANTO = ("optimum-quanto weights (groups, activations) exist only in-process; serve a real checkpoint with "
           "ckpt:FOLDER (e.g. compressed-tensors from llm-compressor), 'wf8' for vLLM's FP8 weights, or raw flags "
           "with vllm:\"ARGS\"#name")
_EXPECTED = "expected bf16, vkvf8[e4|e5], wf8[+vkvf8], ckpt:FOLDER[+vkvf8][#name] or vllm:\"ARGS\"#name"


@dataclass(frozen=True)
class ServedVariant:
    """One vLLM server configuration: what the run calls it, the model folder it serves and its extra flags."""

    name: str
    model: str  # the folder passed as --model
    flags: tuple[str, ...] = ()  # beyond the engine's common flags (dtype, max-model-len, logprobs ...)
    kv_scheme: str = BASE_KV
    spec: str = ""
    baseline: bool = False

    @property
    def is_baseline(self) -> bool:
        return self.baseline

    @property
    def artifact(self) -> str | None:  # the Runner fingerprints ckpt: folders through this
        return self.model if spec_kind(self.spec) == "ckpt" else None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "engine": "vllm", "spec": self.spec, "model": self.model,
                "flags": list(self.flags), "kv_scheme": self.kv_scheme}


def _refusal(text: str, why: str) -> EvalsuiteError:
    """Evalsuite's spec ``text`` has no vLLM equivalent (one line)."""
    return EvalsuiteError(f"variant {text!r} cannot be served by vLLM: {why}")


def _kv_part(text: str, kv: KVConfig | VllmKV | None) -> tuple[tuple[str, ...], str]:
    """(flags, scheme) of a parsed ``+KV`` part; evalsuite's own KV caches are refused."""
    if kv is None:
        return (), BASE_KV
    if not isinstance(kv, VllmKV):
        raise _refusal(text, _OWN_KV)
    return ("--kv-cache-dtype", kv.dtype), VKV[kv.name]


def _ckpt(text: str, ref: CheckpointRef) -> ServedVariant:
    """``ckpt:PATH[+vkvf8][#name]`` -> the folder as the served model."""
    folder = Path(ref.path).expanduser()
    if folder.suffix.lower() == ".gguf":
        raise EvalsuiteError(f"variant {text!r} cannot be served by vLLM here: GGUF files are run in-process "
                             f"(drop --engine vllm) or by llama.cpp (openai:URL)")
    if not (folder / "config.json").is_file():
        raise EvalsuiteError(f"variant {text!r}: {folder} is not a model folder (no config.json)")
    flags, scheme = _kv_part(text, ref.kv)
    name = ref.name or folder.name + ("+" + ref.kv.name if ref.kv is not None else "")
    return ServedVariant(name=name, model=str(folder.resolve()), flags=flags, kv_scheme=scheme, spec=text)


def _raw(text: str, args: VllmArgs, base_model: str) -> ServedVariant:
    """``vllm:"ARGS"#name`` -> the baseline's model with raw flags."""
    flags = args.flags
    if "--model" in flags or "--port" in flags or "--host" in flags:
        raise EvalsuiteError(f"bad served variant {text!r}: --model/--host/--port are set by evalsuite "
                             f"(serve another model with ckpt:FOLDER)")
    dtype = next(iter(flag_values(flags, "--kv-cache-dtype")), "")
    scheme = f"vLLM {dtype} KV cache (raw flags)" if dtype and dtype != "auto" else BASE_KV
    return ServedVariant(name=args.name, model=base_model, flags=flags, kv_scheme=scheme, spec=text)


def _quant(text: str, form: QuantForm, base_model: str) -> ServedVariant:
    """``bf16``, ``vkvf8[e4|e5]``, ``wf8[+vkvf8]``; other weights/KV forms are evalsuite's own (refused)."""
    w = form.weights
    if form.kv is not None and not isinstance(form.kv, VllmKV):
        raise _refusal(text, _OWN_KV)
    if w.fmt == "int" or w.activations != "none" or w.overrides:
        raise _refusal(text, _QUANTO)
    if w.fmt == "none" and form.kv is None:
        if text.lower() not in BASELINE_ALIASES:
            raise _refusal(text, _EXPECTED)
        return ServedVariant(name="bf16", model=base_model, spec="bf16", baseline=True)
    flags, scheme = _kv_part(text, form.kv)
    weights = ("--quantization", "fp8") if w.fmt == "float8" else ()
    name = "+".join([w.name] * bool(weights) + ([form.kv.name] if form.kv is not None else []))
    return ServedVariant(name=name, model=base_model, flags=weights + flags, kv_scheme=scheme, spec=text)


def parse_served(text: str, base_model: str) -> ServedVariant:
    """One spec (parsed by the variant grammar) -> a ServedVariant; what vLLM cannot serve is a one-line
    EvalsuiteError."""
    raw = text.strip()
    kind = spec_kind(raw)
    if kind == "openai":
        raise EvalsuiteError(f"variant {raw!r}: openai: servers you run yourself go without --engine vllm")
    try:
        parsed = parse_spec(raw)
    except SpecError:
        if kind == "ckpt":
            raise
        raise _refusal(raw, _EXPECTED) from None
    if isinstance(parsed, CheckpointRef):
        return _ckpt(raw, parsed)
    if isinstance(parsed, VllmArgs):
        return _raw(raw, parsed, base_model)
    assert isinstance(parsed, QuantForm)  # openai: is refused above
    return _quant(raw, parsed, base_model)


def served_variants(requested: Sequence[Any], base_model: str) -> list[ServedVariant]:
    """The baseline first, then every requested variant parsed; names must be unique and safe."""
    specs = [parse_served("bf16", base_model)]
    for v in requested:
        if not isinstance(v, str):
            raise EvalsuiteError(f"variant {v!r} cannot be served by vLLM: give it as a spec string")
        spec = parse_served(v, base_model)
        if not spec.is_baseline:
            specs.append(spec)
    for s in specs:
        if not _NAME.match(s.name.replace("+", "_")):
            raise EvalsuiteError(f"bad served variant name {s.name!r}: letters, digits, '.', '-', '_', '+' only")
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise EvalsuiteError(f"variant listed twice: {', '.join(dup)} (name it with #NAME)")
    return specs
