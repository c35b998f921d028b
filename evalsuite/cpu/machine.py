"""The machine a run ran on, so that a reader knows why n (and seconds per pair) differ between machines: the CPU's
model name and the instruction-set flags that decide which kernels run, the logical cores this process may use,
and a short calibrated fp32 matmul figure with a speed class. Torch-free (numpy); nothing runs at import.

``speed_class`` by the matmul figure (fp32 GFLOP/s of a 256x256 matmul with numpy's BLAS on every core it uses):

- ``slow``, under 100: a 2-4 core CI runner or small cloud VM (a shared AVX2/AVX-512 core gives ~15-50 GFLOP/s
  here); a sequential run draws few samples in its budget and more checks stay INCONCLUSIVE.
- ``medium``, 100 to 500: a laptop or desktop, or a mid-size VM (8-16 cores).
- ``fast``, 500 and over: a many-core server, AVX-512 or AMX; a budget buys several times the samples of a slow one.

The bounds are coarse on purpose: the figure moves with turbo, noisy neighbours and the BLAS build (a loaded 2-core
VM measured 40-80), and a factor of five between the bounds keeps a machine in its class from run to run.
"""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

#: the /proc/cpuinfo flags that decide the kernels a CPU backend picks (fp32/bf16 matmul, int8, AMX tiles)
KERNEL_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")
#: (upper bound in GFLOP/s, class), first match wins; at and above the last bound: "fast"
CLASSES = ((100.0, "slow"), (500.0, "medium"))
_SIZE = 256  # matmul side: fits the caches, big enough for BLAS to use its vector kernels
_TRIALS = 4  # best of: the first may pay for thread start-up and page faults
_TRIAL_S = 0.05  # seconds per trial: ~0.2 s in all


def cpu_model(cpuinfo: str) -> str:
    """The ``model name`` of /proc/cpuinfo's text (else the platform's processor string, else "unknown")."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def cpu_flags(cpuinfo: str) -> list[str]:
    """The ``KERNEL_FLAGS`` the first CPU of /proc/cpuinfo's text lists, in that order ([] without any)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            have = set(value.split())
            return [f for f in KERNEL_FLAGS if f in have]
    return []


def logical_cores() -> int:
    """The logical cores this process may run on (its affinity where the OS says, else ``os.cpu_count``)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def matmul_gflops(size: int = _SIZE, trials: int = _TRIALS, trial_s: float = _TRIAL_S) -> float:
    """fp32 GFLOP/s of ``size`` x ``size`` matmuls: after one warm-up product, each trial repeats them until
    ``trial_s`` seconds have passed, the best trial wins; no trial starts past ``2 * trials * trial_s`` seconds (a
    loaded machine), so it takes about ``trials * trial_s`` seconds and under twice that."""
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, size, size), dtype=np.float32)
    out = np.empty_like(a)
    np.matmul(a, b, out=out)
    begin, best = time.perf_counter(), float("inf")
    for _ in range(trials):
        count, start = 0, time.perf_counter()
        while True:
            np.matmul(a, b, out=out)
            count += 1
            spent = time.perf_counter() - start
            if spent >= trial_s:
                break
        best = min(best, spent / count)
        if time.perf_counter() - begin > 2 * trials * trial_s - trial_s:
            break
    return 2.0 * size**3 / max(best, 1e-9) / 1e9


def speed_class(gflops: float) -> str:
    """``slow`` / ``medium`` / ``fast`` by the matmul figure (``CLASSES``; the module docstring says why)."""
    return next((name for bound, name in CLASSES if gflops < bound), "fast")


def machine_info(cpuinfo_path: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """``{"cpu", "flags", "cores", "gflops", "speed_class"}`` of this machine; ``flags`` empty where there is no
    /proc/cpuinfo (other OSes). Takes about 0.2 s (the matmul figure)."""
    try:
        text = cpuinfo_path.read_text(errors="replace")
    except OSError:
        text = ""
    gflops = matmul_gflops()
    return {"cpu": cpu_model(text), "flags": cpu_flags(text), "cores": logical_cores(),
            "gflops": round(gflops, 1), "speed_class": speed_class(gflops)}


def machine_text(machine: dict[str, Any] | None) -> str:
    """``CPU: Intel Xeon, 2 cores, avx2 fma, 38 GFLOP/s fp32 (slow class)`` of a stored ``machine_info``; "" for
    none (a run stored before it was recorded)."""
    if not machine:
        return ""
    parts = [str(machine.get("cpu") or "unknown CPU")]
    if machine.get("cores"):
        parts.append(f"{machine['cores']} cores")
    if machine.get("flags"):
        parts.append(" ".join(machine["flags"]))
    if machine.get("gflops") is not None:
        parts.append(f"{float(machine['gflops']):.0f} GFLOP/s fp32"
                     + (f" ({machine['speed_class']} class)" if machine.get("speed_class") else ""))
    return "CPU: " + ", ".join(parts)
