"""The runtime-support table against the engine code: what vLLM serves as the run wrote it is exactly what
``backends/served/vllm/specs.py`` accepts; its CPU-build rules are ``backend.NO_CPU_QUANTIZATION`` and ``fp8_kv_runs``;
what transformers serves as written is what the in-process engine builds; docs/tenants.md shows this table."""
from __future__ import annotations

from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.backends.served.vllm.backend import FP8_KV_AVX512, NO_CPU_QUANTIZATION, fp8_kv_runs, refuse_unsupported
from evalsuite.backends.served.vllm.specs import parse_served
from evalsuite.tenants.forms import form_of, form_of_spec
from evalsuite.tenants.runtimes import FP8_KV_CPU, KV, WEIGHTS, markdown, serves
from evalsuite.variants.spec import parse_variant

SPECS = ["bf16", "w8", "w4g128", "w4g64", "w4g32", "w2g64", "wf8", "w8a8", "w4a8", "wf8af8", "kv8", "kv4g32",
         "kv2g64", "kvf8e4", "kvhf4", "w4g64+kv4g32", "wf8+kv8", "vkvf8", "vkvf8e5", "wf8+vkvf8",
         "w4g128[keep=l0]", 'vllm:"--kv-cache-dtype int4_per_token_head"#pth4', 'vllm:"--quantization fp8"#f8']
ROOT = Path(__file__).parents[2]


def _level(runtime: str, spec: str) -> str:
    """The table's verdict on a spec: ``spec`` only when both its weights and its KV are served as written."""
    form = form_of_spec(spec)
    cells = [WEIGHTS[form.weights][runtime], KV[form.kv][runtime]]
    return min((c.level for c in cells), key=["no", "artifact", "spec"].index)


def _accepts(parse, spec: str) -> bool:
    try:
        parse(spec)
    except EvalsuiteError:
        return False
    return True


@pytest.mark.parametrize("spec", SPECS)
def test_vllm_serves_as_written_exactly_what_the_vllm_engine_accepts(spec):
    assert (_level("vllm", spec) == "spec") == _accepts(lambda s: parse_served(s, "/m"), spec)


@pytest.mark.parametrize("spec", [s for s in SPECS if not s.startswith("vllm:")])
def test_transformers_serves_as_written_exactly_what_the_inprocess_engine_builds(spec):
    assert (_level("transformers", spec) == "spec") == _accepts(parse_variant, spec)


def test_gguf_files_are_not_vllms(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert WEIGHTS["gguf"]["vllm"].level == "no" and WEIGHTS["gguf"]["llama.cpp"].level == "spec"
    assert not _accepts(lambda s: parse_served(s, "/m"), f"ckpt:{gguf}")
    assert form_of_spec(f"ckpt:{gguf}").weights == "gguf"


def test_cpu_rules_are_the_vllm_backends():
    """GPU-only weights are NO_CPU_QUANTIZATION's; the FP8 cache's CPU flags are fp8_kv_runs'."""
    gpu_only = {k for k, cells in WEIGHTS.items() if cells["vllm"].gpu_only}
    assert gpu_only == {"fp8"} and "fp8" in NO_CPU_QUANTIZATION
    with pytest.raises(EvalsuiteError, match="--quantization fp8"):
        refuse_unsupported([parse_served("wf8", "/m")], "cpu", "0.32", cpu=set(FP8_KV_CPU))
    assert FP8_KV_CPU == FP8_KV_AVX512 and KV["vllm-fp8"]["vllm"].cpu_flags == FP8_KV_CPU
    assert fp8_kv_runs(set(FP8_KV_CPU)) and not any(fp8_kv_runs(set(FP8_KV_CPU) - {f}) for f in FP8_KV_CPU)
    refuse_unsupported([parse_served("vkvf8", "/m")], "cpu", "0.32", cpu=set(FP8_KV_CPU))
    with pytest.raises(EvalsuiteError, match="AVX-512"):
        refuse_unsupported([parse_served("vkvf8", "/m")], "cpu", "0.32", cpu=set())
    for spec in SPECS:  # what the table serves as written on a CPU build, the backend lets through there
        form = form_of_spec(spec)
        cells = [WEIGHTS[form.weights]["vllm"], KV[form.kv]["vllm"]]
        if _level("vllm", spec) == "spec" and not any(c.gpu_only for c in cells):
            refuse_unsupported([parse_served(spec, "/m")], "cpu", "0.32", cpu=set(FP8_KV_CPU))


def test_a_vllm_tenant_never_gets_evalsuites_kv_cache():
    for spec in SPECS:
        form = form_of_spec(spec)
        if form.kv in ("evalsuite", "hf"):
            got = serves("vllm", form, spec)
            assert not got.ok and "vllm serves no" in got.why, spec
    assert serves("any", form_of_spec("kv4g32"), "kv4g32").ok


def test_stored_variant_infos_read_as_their_specs():
    for spec in ("w4g128[keep=l0]+kv4g32", "wf8af8", "kvhf4", "bf16"):
        v = parse_variant(spec)
        assert form_of(v.name, v.to_dict()) == form_of_spec(spec)
    assert form_of("vkvf8", {"engine": "vllm", "spec": "vkvf8", "flags": []}).engine == "vllm"
    assert form_of("x", {"name": "x", "endpoint": "http://h/v1"}).weights == "unknown"
    assert form_of("kv", None).weights == "unknown"  # a compared run's variant: no spec, no bytes
    assert form_of("kv", {"format": "lm-eval", "log": "/x", "model": "m"}).weights == "unknown"
    assert form_of("w4g64", {"format": "lm-eval", "log": "/x", "model": "m"}).weights == "int4"  # its name is one


def test_docs_show_this_table():
    text = (ROOT / "docs" / "tenants.md").read_text(encoding="utf-8")
    assert markdown() in text, "docs/tenants.md: paste evalsuite.tenants.runtimes.markdown()'s table"
