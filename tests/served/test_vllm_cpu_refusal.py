"""``wf8`` (``--quantization fp8``) where vLLM's device cannot run it: one line, exit 2, before any server starts."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.served.vllm.backend import refuse_unsupported
from evalsuite.served.vllm.specs import parse_served


@pytest.mark.parametrize("text", ["wf8", "wf8+vkvf8", 'vllm:"--quantization fp8_per_tensor"#q',
                                  'vllm:"--quantization=fp8"#q'])
def test_fp8_weights_refused_on_cpu(text: str) -> None:
    spec = parse_served(text, "/m")
    with pytest.raises(EvalsuiteError) as exc:
        refuse_unsupported([parse_served("bf16", "/m"), spec], "cpu", "0.32.0")
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value) and "fp8" in str(exc.value)
    refuse_unsupported([spec], "cuda", "0.32.0")  # a GPU gets the flag unchanged


def test_other_variants_pass_on_cpu() -> None:
    refuse_unsupported([parse_served(t, "/m") for t in ("bf16", "vkvf8", 'vllm:"--enforce-eager"#e')], "cpu", "0.32")


@pytest.mark.vllm
def test_cli_refuses_wf8_on_cpu_before_any_server(tmp_path: Path, vllm_python_path: str) -> None:
    from evalsuite.served.vllm.server import vllm_version

    if vllm_version(vllm_python_path)[1] != "cpu":
        pytest.skip("vLLM here is not the CPU build")  # a GPU vLLM serves wf8
    exe = str(Path(sys.executable).with_name("evalsuite"))
    p = subprocess.run([exe, "run", "--engine", "vllm", "--vllm-python", vllm_python_path, "--variants", "wf8",
                        "--tasks", "json", "--limit", "1", "--out", str(tmp_path), "-q"],
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "fp8" in lines[0], p.stderr
    assert not list(tmp_path.rglob("servers"))  # no server log: nothing started
