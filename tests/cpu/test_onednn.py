"""oneDNN's level and batch invariance on CPUs with AMX (evalsuite.cpu.onednn)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalsuite.cpu import onednn

CLEAN = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def test_cpu_flags_reads_the_flags_lines(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 amx_bf16\n\nflags\t\t: fpu avx512f\n")
    assert onednn.cpu_flags(str(info)) == {"fpu", "avx2", "amx_bf16", "avx512f"}
    assert onednn.cpu_flags(str(tmp_path / "missing")) == set()


@pytest.mark.parametrize("env, setting", [({}, "default"), ({"ONEDNN_MAX_CPU_ISA": onednn.CAP}, onednn.CAP),
                                          ({"DNNL_MAX_CPU_ISA": "AVX2"}, "AVX2")])
def test_the_level_in_force_is_recorded(env: dict[str, str], setting: str) -> None:
    assert onednn.isa_setting(env) == setting


PROBE = ("import evalsuite, torch; from evalsuite.models.invariance import probe; "
         "print(probe(torch.bfloat16, ((576, 192), (576, 576), (576, 1536), (1536, 576), (576, 49152)), 64).ok)")


@pytest.mark.slow
@pytest.mark.skipif("amx_bf16" not in onednn.cpu_flags(onednn.CPUINFO), reason="this CPU has no AMX (hardware flags)")
def test_capping_onednn_below_amx_makes_bf16_matmuls_batch_invariant() -> None:
    """What docs/verification.md tells AMX users, checked on this machine at SmolLM2-135M's shapes."""
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**env, "ONEDNN_MAX_CPU_ISA": onednn.CAP},
                         capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "True"
