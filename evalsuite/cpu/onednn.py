"""oneDNN's kernel level, which decides whether bf16 matmuls are batch-invariant on CPUs with AMX.

torch runs bf16 matmuls on the CPU through oneDNN, which picks its kernel by the CPU's best instruction set and the
call's shape. On AVX-512-BF16 CPUs without AMX a Linear's output row does not depend on how many rows the call has
(from ``models.invariance.MIN_ROWS`` on): verification is exact there (``backends.inprocess.verify``). On CPUs with AMX
(Intel Sapphire Rapids and later, flag ``amx_bf16``) oneDNN switches between AMX and AVX-512 kernels by the number of
rows: SmolLM2-135M's projections compute a row differently at 33-299 rows than at <= 32 or >= 300 (a 2-core Xeon with
AMX, torch 2.13), so ``models.invariance.probe`` fails, verification keeps its near-tie margins and a bf16 greedy
answer can change with its batch.

``ONEDNN_MAX_CPU_ISA=AVX512_CORE_FP16`` (set before evalsuite or torch is imported: oneDNN reads it once) caps oneDNN
one level below AMX; the probe passes again. evalsuite does not set it for you, because the cap costs more than
exact verification saves (``benchmarks/cpu/onednn_isa.py``, same machine, side by side: a 2,048-token prefill 0.94 s
with AMX against 3.34 s capped; a whole cold run of the mission's grid 98.9 s, with SDPA since the probe fails,
against 198.0 s capped, with the invariant kernels). Set it where a run must be reproducible across batch sizes.
The level in force is part of a run's settings and of a stored baseline's key (``isa_setting``), so baselines
generated at different levels are never mixed.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

CAP = "AVX512_CORE_FP16"  #: the oneDNN level just below AVX512_CORE_AMX
_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
#: the CPU flags evalsuite's own feature checks believe instead of /proc/cpuinfo's (space-separated, e.g.
#: ``"avx avx2 fma"`` to see what an AVX2-only CPU such as a Zen 1 is told; an environment variable, so the CLI in a
#: subprocess sees it too). It changes evalsuite's decisions only, never the kernels torch or oneDNN pick: pair it
#: with ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` to compute as such a CPU would.
OVERRIDE = "EVALSUITE_CPU_FLAGS"
CPUINFO = "/proc/cpuinfo"


def cpu_flags(path: str | None = None, env: Mapping[str, str] | None = None) -> set[str]:
    """The CPU's feature flags: ``$EVALSUITE_CPU_FLAGS`` where it is set and no ``path`` is given, else the flags
    lines of ``path`` (default ``/proc/cpuinfo``; empty where it is missing or unreadable). Pass ``CPUINFO`` to read
    the hardware whatever the override says."""
    env = os.environ if env is None else env
    if path is None and env.get(OVERRIDE, "").strip():
        return set(env[OVERRIDE].split())
    try:
        with open(path or CPUINFO) as fh:
            return {f for line in fh if line.startswith("flags") for f in line.split(":", 1)[1].split()}
    except OSError:
        return set()


def isa_setting(env: Mapping[str, str] | None = None) -> str:
    """The oneDNN level this process runs at, for a run's settings: the variable's value, or "default"."""
    env = os.environ if env is None else env
    return next((env[n] for n in _VARIABLES if n in env), "default")
