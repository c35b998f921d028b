"""``wf8`` (``--quantization fp8``) and, on a CPU without AVX-512 or AMX, ``vkvf8`` (``--kv-cache-dtype fp8``)
where vLLM's device cannot run them: one line, exit 2, before any server starts."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.cpu.onednn import CPUINFO, OVERRIDE, cpu_flags
from evalsuite.backends.served.vllm.backend import FP8_KV_AVX512, fp8_kv_runs, refuse_unsupported
from evalsuite.backends.served.vllm.specs import parse_served


@pytest.mark.parametrize("text", ["wf8", "wf8+vkvf8", 'vllm:"--quantization fp8_per_tensor"#q',
                                  'vllm:"--quantization=fp8"#q'])
def test_fp8_weights_refused_on_cpu(text: str) -> None:
    spec = parse_served(text, "/m")
    with pytest.raises(EvalsuiteError) as exc:
        refuse_unsupported([parse_served("bf16", "/m"), spec], "cpu", "0.32.0")
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value) and "fp8" in str(exc.value)
    refuse_unsupported([spec], "cuda", "0.32.0")  # a GPU gets the flag unchanged


def test_other_variants_pass_on_cpu() -> None:
    specs = [parse_served(t, "/m") for t in ("bf16", "vkvf8", 'vllm:"--enforce-eager"#e')]
    refuse_unsupported(specs, "cpu", "0.32", cpu=set(FP8_KV_AVX512) | {"avx2"})
    refuse_unsupported(specs, "cpu", "0.32", cpu={"avx2", "amx_tile"})


def test_the_override_is_what_the_refusal_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """``$EVALSUITE_CPU_FLAGS`` replaces /proc/cpuinfo's flags for the refusal (what an AVX2 CPU is told, on any CPU),
    and an explicit path still reads the file."""
    spec = parse_served("vkvf8", "/m")
    monkeypatch.setenv(OVERRIDE, "avx avx2 fma")
    assert cpu_flags() == {"avx", "avx2", "fma"}
    with pytest.raises(EvalsuiteError, match="AVX-512"):
        refuse_unsupported([spec], "cpu", "0.32.0")
    monkeypatch.setenv(OVERRIDE, " ".join(sorted(FP8_KV_AVX512)))
    refuse_unsupported([spec], "cpu", "0.32.0")
    assert cpu_flags(CPUINFO) == cpu_flags(CPUINFO, env={})


@pytest.mark.parametrize("text", ["vkvf8", "vkvf8e5", "bf16+vkvf8", 'vllm:"--kv-cache-dtype=fp8_e4m3"#k'])
def test_fp8_kv_refused_without_avx512_or_amx(text: str) -> None:
    """vLLM 0.32's CPU attention raises "FP8 KV cache on CPU requires x86 with AVX-512 or AMX" only after its
    ~5-minute warm-up; evalsuite says so first."""
    spec = parse_served(text, "/m")
    for cpu in ({"avx2", "fma"}, {"avx2", "avx512f", "avx512_bf16"}):  # avx512f alone is not torch's AVX-512 level
        with pytest.raises(EvalsuiteError) as exc:
            refuse_unsupported([parse_served("bf16", "/m"), spec], "cpu", "0.32.0", cpu=cpu)
        msg = str(exc.value)
        assert exc.value.exit_code == 2 and "\n" not in msg and "fp8" in msg and "AVX-512" in msg, msg
    refuse_unsupported([spec], "cuda", "0.32.0", cpu={"avx2"})  # a GPU runs it


def test_fp8_kv_check_is_torchs() -> None:
    """On this machine's hardware (never ``$EVALSUITE_CPU_FLAGS``) the flags rule agrees with the torch functions
    vLLM's CPU attention asks."""
    import torch

    assert fp8_kv_runs(cpu_flags(CPUINFO)) == (torch.cpu._is_avx512_supported() or torch.cpu._is_amx_tile_supported())


def test_failed_start_names_the_root_cause(tmp_path: Path) -> None:
    from evalsuite.backends.served.vllm.server import failure_line

    log = tmp_path / "server.log"
    log.write_text("INFO starting\n(EngineCore pid=1) ERROR [core.py:1] Traceback (most recent call last):\n"
                   "(Worker pid=2) ERROR [x.py:9]     raise NotImplementedError(\n"
                   "(Worker pid=2) ERROR [x.py:9] NotImplementedError: FP8 KV cache on CPU requires AVX-512.\n"
                   "RuntimeError: Engine core initialization failed. See root cause above.\n"
                   "  warnings.warn('resource_tracker: There appear to be %d '\n\n")
    assert failure_line(log) == "NotImplementedError: FP8 KV cache on CPU requires AVX-512."
    log.write_text("usage: api_server.py [-h]\napi_server.py: error: argument --kv-cache-dtype: invalid choice: "
                   "'int3'\n")
    assert "invalid choice: 'int3'" in failure_line(log)
    assert failure_line(tmp_path / "missing.log") == "no log"


@pytest.mark.vllm
@pytest.mark.parametrize("variant", ["wf8", "vkvf8"])
def test_cli_refuses_on_cpu_before_any_server(variant: str, tmp_path: Path, vllm_python_path: str) -> None:
    """The CLI in a subprocess is told it runs on an AVX2-only CPU (``$EVALSUITE_CPU_FLAGS``), whatever this one has:
    the same outcome on every ISA."""
    from evalsuite.backends.served.vllm.server import vllm_version

    if vllm_version(vllm_python_path)[1] != "cpu":
        pytest.skip("vLLM here is not the CPU build")  # a GPU vLLM serves both
    exe = str(Path(sys.executable).with_name("evalsuite"))
    p = subprocess.run([exe, "run", "--engine", "vllm", "--vllm-python", vllm_python_path, "--variants", variant,
                        "--tasks", "json", "--limit", "1", "--out", str(tmp_path), "-q"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, OVERRIDE: "avx avx2 fma"})
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "fp8" in lines[0], p.stderr
    assert not list(tmp_path.rglob("servers"))  # no server log: nothing started
