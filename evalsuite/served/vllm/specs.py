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
line before any server starts.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from evalsuite.errors import EvalsuiteError

BASELINE_ALIASES = ("bf16", "base")
VKV = {"vkvf8": ("fp8", "vLLM fp8 KV cache (fp8_e4m3, per-tensor scale, no residual)"),
       "vkvf8e4": ("fp8_e4m3", "vLLM fp8_e4m3 KV cache (per-tensor scale, no residual)"),
       "vkvf8e5": ("fp8_e5m2", "vLLM fp8_e5m2 KV cache (no scale, no residual)")}
BASE_KV = "vLLM bf16 KV cache (unquantized)"
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


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
        return self.model if self.spec.startswith("ckpt:") else None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "engine": "vllm", "spec": self.spec, "model": self.model,
                "flags": list(self.flags), "kv_scheme": self.kv_scheme}


def _refusal(text: str) -> str:
    """Why evalsuite's spec ``text`` has no vLLM equivalent (one line)."""
    low = text.lower()
    if re.search(r"(^|\+)kv(f8e[45]|\d|hf)", low):
        return (f"variant {text!r} cannot be served by vLLM: it is evalsuite's own KV cache (grouped scales, a "
                f"full-precision residual) in transformers; vLLM's FP8 KV cache is spelt 'vkvf8' (or vkvf8e4 / "
                f"vkvf8e5), and vLLM has no int4/int2 KV cache")
    if re.match(r"^w\d", low) or "a8" in low:
        return (f"variant {text!r} cannot be served by vLLM: optimum-quanto weights (groups, activations) exist "
                f"only in-process; serve a real checkpoint with ckpt:FOLDER (e.g. compressed-tensors from "
                f"llm-compressor), 'wf8' for vLLM's FP8 weights, or raw flags with vllm:\"ARGS\"#name")
    return (f"variant {text!r} cannot be served by vLLM: expected bf16, vkvf8[e4|e5], wf8[+vkvf8], "
            f"ckpt:FOLDER[+vkvf8][#name] or vllm:\"ARGS\"#name")


def _kv_part(text: str, parts: Sequence[str]) -> tuple[tuple[str, ...], str]:
    """(flags, scheme) of the ``+KV`` parts; anything else is refused."""
    if not parts:
        return (), BASE_KV
    if len(parts) > 1 or parts[0].lower() not in VKV:
        raise EvalsuiteError(_refusal(text))
    dtype, scheme = VKV[parts[0].lower()]
    return ("--kv-cache-dtype", dtype), scheme


def _ckpt(text: str, body: str) -> ServedVariant:
    """``ckpt:PATH[+vkvf8][#name]`` -> the folder as the served model."""
    path, _, name = body.partition("#")
    path, *kv = path.split("+")
    folder = Path(path).expanduser()
    if folder.suffix.lower() == ".gguf":
        raise EvalsuiteError(f"variant {text!r} cannot be served by vLLM here: GGUF files are run in-process "
                             f"(drop --engine vllm) or by llama.cpp (openai:URL)")
    if not (folder / "config.json").is_file():
        raise EvalsuiteError(f"variant {text!r}: {folder} is not a model folder (no config.json)")
    flags, scheme = _kv_part(text, kv)
    name = name.strip() or folder.name + ("+" + kv[0] if kv else "")
    return ServedVariant(name=name, model=str(folder.resolve()), flags=flags, kv_scheme=scheme, spec=text)


def _raw(text: str, body: str, base_model: str) -> ServedVariant:
    """``vllm:"ARGS"#name`` -> the baseline's model with raw flags."""
    args, _, name = body.rpartition("#")
    if not name.strip() or not args.strip():
        raise EvalsuiteError(f"bad served variant {text!r}: expected vllm:\"--flag value ...\"#name")
    try:
        flags = tuple(shlex.split(args.strip().strip("'\"") if args.strip()[:1] in "'\"" else args))
    except ValueError as exc:
        raise EvalsuiteError(f"bad served variant {text!r}: {exc}") from None
    if "--model" in flags or "--port" in flags or "--host" in flags:
        raise EvalsuiteError(f"bad served variant {text!r}: --model/--host/--port are set by evalsuite "
                             f"(serve another model with ckpt:FOLDER)")
    dtype = flags[flags.index("--kv-cache-dtype") + 1] if "--kv-cache-dtype" in flags[:-1] else ""
    scheme = f"vLLM {dtype} KV cache (raw flags)" if dtype and dtype != "auto" else BASE_KV
    return ServedVariant(name=name.strip(), model=base_model, flags=flags, kv_scheme=scheme, spec=text)


def parse_served(text: str, base_model: str) -> ServedVariant:
    """One spec -> a ServedVariant; what vLLM cannot serve is a one-line EvalsuiteError."""
    raw = text.strip()
    low = raw.lower()
    if low in BASELINE_ALIASES:
        return ServedVariant(name="bf16", model=base_model, spec="bf16", baseline=True)
    if low.startswith("ckpt:"):
        return _ckpt(raw, raw[5:])
    if low.startswith("vllm:"):
        return _raw(raw, raw[5:], base_model)
    if low.startswith("openai:"):
        raise EvalsuiteError(f"variant {raw!r}: openai: servers you run yourself go without --engine vllm")
    head, *kv = raw.split("+")
    if head.lower() in VKV and not kv:
        flags, scheme = _kv_part(raw, [head])
        return ServedVariant(name=low, model=base_model, flags=flags, kv_scheme=scheme, spec=raw)
    if head.lower() == "wf8":
        flags, scheme = _kv_part(raw, kv)
        return ServedVariant(name=low, model=base_model, flags=("--quantization", "fp8") + flags,
                             kv_scheme=scheme, spec=raw)
    raise EvalsuiteError(_refusal(raw))


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
