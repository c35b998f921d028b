"""The CPU class a float32 run's answers belong to: part of a stored baseline's key.

The same model, dtype and settings give answers that are close, not identical, on CPUs whose kernels differ
(benchmarks/RESULTS.md: fp32 answers between an AVX2 Zen and an AVX-512 CPU). What picks the kernels is the CPU's
vendor (MKL dispatches on it), the instruction set ATen runs its vectorized kernels at (``ATEN_CPU_CAPABILITY`` caps
it) and the one MKL's GEMM uses (``MKL_ENABLE_INSTRUCTIONS`` caps it; MKL's reduction order is ``evalsuite.cpu.mkl``'s
separate key, and oneDNN's level ``evalsuite.cpu.onednn``'s). The class names all three, e.g.
``AuthenticAMD_aten-AVX2_mkl-avx2``: a baseline shipped for one class is never reused on another
(``run.baselines``), and the shipped folder ``baselines/<class>/`` says which CPUs it serves.

It always reads the hardware (``/proc/cpuinfo``), never ``$EVALSUITE_CPU_FLAGS``: that override changes evalsuite's
own decisions, not the kernels torch picks, so it must not make a baseline look computed elsewhere.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

from evalsuite.cpu.onednn import CPUINFO, cpu_flags

MKL_CAP = "MKL_ENABLE_INSTRUCTIONS"  #: MKL's own cap on its instruction set (e.g. AVX2)


def vendor(path: str = CPUINFO) -> str:
    """The CPU vendor string (``GenuineIntel``, ``AuthenticAMD``...), or ``unknown``."""
    try:
        with open(path) as fh:
            return next((line.split(":", 1)[1].strip() for line in fh if line.startswith("vendor_id")), "unknown")
    except OSError:
        return "unknown"


def mkl_level(path: str = CPUINFO, env: Mapping[str, str] | None = None) -> str:
    """The instruction set MKL's GEMM runs at: its cap where set, else the best of AVX-512 / AVX2 the CPU has."""
    env = os.environ if env is None else env
    if env.get(MKL_CAP, "").strip():
        return env[MKL_CAP].strip().lower()
    flags = cpu_flags(path)
    return "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "sse"


def cpu_class(aten_capability: str, path: str = CPUINFO, env: Mapping[str, str] | None = None) -> str:
    """``<vendor>_aten-<ATen capability>_mkl-<MKL level>``; ``aten_capability`` is what torch runs at
    (``torch.backends.cpu.get_cpu_capability()``, which honours ``ATEN_CPU_CAPABILITY``)."""
    return f"{vendor(path)}_aten-{aten_capability}_mkl-{mkl_level(path, env)}"


def host_class() -> str:
    """This process's class: ``cpu_class`` at the capability torch runs at (imports torch)."""
    import torch

    return cpu_class(torch.backends.cpu.get_cpu_capability())
