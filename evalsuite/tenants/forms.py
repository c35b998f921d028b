"""What a run's variant is, as far as serving it goes: its weight and KV formats, the engine that ran it, and what the
planner needs to size it (``Form``). Read from a spec string (the variant grammar) or from the ``VariantInfo.spec``
a run stored (an in-process ``VariantSpec.to_dict()``, a served variant's ``{"engine": "vllm", "spec": ...}``).

Weight formats: ``bf16``, ``int8`` / ``int4`` / ``int2`` (optimum-quanto, in-process), ``fp8``, activations too
(``w8a8``, ``w4a8``, ``fp8a8``), a ``ckpt:`` model folder (``ckpt``) or ``.gguf`` file (``gguf``), ``unknown``.
KV formats: ``bf16``, ``evalsuite`` (evalsuite's own cache: grouped scales, a bf16 residual), ``hf``
(transformers' QuantizedCache), ``vllm-fp8`` (vLLM's per-tensor FP8 cache), ``vllm-pth`` (vLLM's per-token-head
int8/int4/fp8 caches), ``unknown``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from evalsuite.errors import EvalsuiteError
from evalsuite.kvcache.config import KVConfig
from evalsuite.variants.forms import WeightSpec
from evalsuite.variants.grammar import CheckpointRef, EndpointSpec, VllmArgs, flag_values, parse_spec
from evalsuite.variants.quant_grammar import QuantForm, VllmKV
from evalsuite.variants.spec import variant_from_dict

BYTES_PER_VALUE = {"fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}  #: a served cache's bytes per K/V value


@dataclass(frozen=True)
class Form:
    """A variant's formats and the engine that ran it (``transformers``: evalsuite in-process; ``vllm``;
    ``endpoint``: a server evalsuite does not know)."""

    weights: str
    kv: str
    engine: str = "transformers"
    weight_spec: WeightSpec | None = None  # in-process weights: the planner's formula
    kv_config: KVConfig | None = None  # evalsuite's or transformers' cache: the planner's formula
    kv_dtype: str | None = None  # a vLLM cache's --kv-cache-dtype
    group: int | None = None  # int4 / int2 weights' group size

    @property
    def weights_label(self) -> str:
        if self.weights in ("int4", "int2", "int8") and self.group:
            return f"{self.weights} g{self.group}"
        return self.weights

    @property
    def kv_label(self) -> str:
        if self.kv_config is not None:
            return f"{self.kv} {self.kv_config.name}"
        return f"vLLM {self.kv_dtype}" if self.kv_dtype else self.kv


UNKNOWN = Form("unknown", "unknown", "endpoint")


def _weights(w: WeightSpec) -> tuple[str, int | None]:
    """(format, group) of in-process weights."""
    if w.fmt == "none":
        return "bf16", None
    if w.fmt == "float8":
        return ("fp8a8" if w.activations != "none" else "fp8"), None
    if w.activations != "none":
        return f"w{w.bits}a8", None
    return f"int{w.bits}", w.group


def _kv(kv: KVConfig | VllmKV | None) -> tuple[str, KVConfig | None, str | None]:
    """(format, config, served dtype) of a parsed KV part."""
    if kv is None:
        return "bf16", None, None
    if isinstance(kv, VllmKV):
        return "vllm-fp8", None, kv.dtype
    return ("hf" if kv.backend == "hf" else "evalsuite"), kv, None


def _quant(q: QuantForm) -> Form:
    fmt, group = _weights(q.weights)
    kv, cfg, dtype = _kv(q.kv)
    return Form(fmt, kv, "vllm" if dtype else "transformers", q.weights, cfg, dtype, group)


def _flag(flags: tuple[str, ...], name: str) -> str | None:
    """The last value of ``name`` in raw server flags."""
    found = flag_values(flags, name)
    return found[-1] if found else None


def _raw(args: VllmArgs) -> Form:
    """``vllm:"ARGS"#name``: the baseline's weights unless ``--quantization``, its KV cache from
    ``--kv-cache-dtype``."""
    quant, dtype = _flag(args.flags, "--quantization"), _flag(args.flags, "--kv-cache-dtype")
    weights = "bf16" if quant is None else ("fp8" if quant.startswith("fp8") else "unknown")
    if dtype in (None, "auto", "bfloat16", "float16"):
        kv = "bf16"
    else:
        kv = "vllm-fp8" if dtype in BYTES_PER_VALUE else ("vllm-pth" if dtype.endswith("per_token_head") else "unknown")
    return Form(weights, kv, "vllm", kv_dtype=dtype if kv != "bf16" else None)


def form_of_spec(text: str, engine: str | None = None) -> Form:
    """The form of a spec string; ``engine`` overrides the engine the spec implies. Unparseable: ``UNKNOWN``."""
    try:
        parsed = parse_spec(text)
    except EvalsuiteError:
        return UNKNOWN
    if isinstance(parsed, QuantForm):
        form = _quant(parsed)
    elif isinstance(parsed, CheckpointRef):
        kv, cfg, dtype = _kv(parsed.kv)
        weights = "gguf" if parsed.path.lower().endswith(".gguf") else "ckpt"
        form = Form(weights, kv, "vllm" if dtype else "transformers", None, cfg, dtype)
    elif isinstance(parsed, VllmArgs):
        form = _raw(parsed)
    else:
        assert isinstance(parsed, EndpointSpec)
        return UNKNOWN
    return form if engine is None else Form(form.weights, form.kv, engine, form.weight_spec, form.kv_config,
                                            form.kv_dtype, form.group)


def form_of(name: str, spec: Mapping[str, Any] | None) -> Form:
    """The form of the run's variant ``name`` from its stored ``VariantInfo.spec`` (else from its name, when the
    name is a spec string)."""
    if not spec:
        return form_of_spec(name)
    if spec.get("engine") == "vllm":
        return form_of_spec(str(spec.get("spec") or name), engine="vllm")
    if "endpoint" in spec:
        return UNKNOWN
    if "weights" not in spec and not spec.get("artifact"):  # a compared log's (format, log, model): no spec
        return form_of_spec(name)
    if spec.get("artifact"):
        kv = KVConfig(**spec["kv"]) if spec.get("kv") else None
        fmt, cfg, _ = _kv(kv)
        return Form("gguf" if str(spec["artifact"]).lower().endswith(".gguf") else "ckpt", fmt, kv_config=cfg)
    try:
        v = variant_from_dict(dict(spec))
    except (EvalsuiteError, KeyError, TypeError):
        return form_of_spec(name)
    return _quant(QuantForm(v.weights, v.kv))
