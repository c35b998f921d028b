"""Sandbox settings, results and the per-machine timeout scale."""
from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from typing import Literal

from evalsuite.errors import EvalsuiteError

#: Every status a sandboxed run can end with (``passed`` is the only success).
STATUSES = ("passed", "failed", "exception", "timeout", "memory", "killed", "output_limit")

Isolation = Literal["auto", "namespace", "process"]

#: Seconds a fixed pure-Python workload takes on the reference machine (see ``calibrate_timeout_scale``).
REFERENCE_WORKLOAD_S = 0.06
SCALE_ENV = "EVALSUITE_SANDBOX_TIMEOUT_SCALE"


class SandboxUnavailable(EvalsuiteError):
    """The sandbox could not be set up (so nothing may run unsandboxed)."""


@dataclass(frozen=True)
class SandboxConfig:
    """Limits for one sandboxed program. Times are multiplied by ``timeout_scale``.

    ``isolation``: ``namespace`` (fresh net/mount/pid/ipc/uts namespaces, chroot into a tmpfs, unprivileged uid),
    ``process`` (fallback: rlimits, unprivileged uid when root, audit hooks), or ``auto`` (namespace when the
    machine allows it). There is deliberately no way to run unsandboxed.
    """

    timeout_s: float = 10.0  # wall clock for the whole program (tests included)
    cpu_s: float | None = None  # RLIMIT_CPU; defaults to timeout_s
    memory_mb: int = 1024  # RLIMIT_AS
    file_size_mb: int = 16  # RLIMIT_FSIZE (any single file the program writes)
    disk_mb: int = 64  # size of the tmpfs that is the whole writable filesystem (namespace mode)
    max_processes: int = 32  # RLIMIT_NPROC for the sandbox uid
    max_open_files: int = 64  # RLIMIT_NOFILE
    output_limit_bytes: int = 1_000_000  # stdout+stderr beyond this: killed, status output_limit
    keep_output_bytes: int = 8192  # how much of each stream the result keeps
    isolation: Isolation = "auto"
    user: str = "nobody"  # uid the program runs as when the host runs as root
    timeout_scale: float | None = None  # None: $EVALSUITE_SANDBOX_TIMEOUT_SCALE or 1.0

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.memory_mb < 64 or self.max_processes < 1:
            raise EvalsuiteError("sandbox: timeout_s must be > 0, memory_mb >= 64, max_processes >= 1")
        if self.isolation not in ("auto", "namespace", "process"):
            raise EvalsuiteError(f"sandbox: unknown isolation {self.isolation!r} (auto, namespace, process)")

    def scale(self) -> float:
        if self.timeout_scale is not None:
            return self.timeout_scale
        raw = os.environ.get(SCALE_ENV)
        if raw is None:
            return 1.0
        if raw == "auto":
            return calibrate_timeout_scale()
        try:
            return max(0.1, float(raw))
        except ValueError:
            raise EvalsuiteError(f"{SCALE_ENV} must be a number or 'auto', got {raw!r}") from None

    def wall_s(self) -> float:
        return self.timeout_s * self.scale()

    def cpu_limit_s(self) -> int:
        return max(1, int(round((self.cpu_s or self.timeout_s) * self.scale())))


@dataclass(frozen=True)
class SandboxResult:
    """How one program ended: ``status`` (one of STATUSES) and a one-line ``reason``."""

    status: str
    reason: str
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    returncode: int | None = None
    isolation: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _workload() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(300_000):
        total += (i * i) % 7
    return time.perf_counter() - start


@functools.lru_cache(maxsize=1)
def calibrate_timeout_scale() -> float:
    """How much slower this machine runs pure Python than the reference (>= 1; best of 3 runs)."""
    best = min(_workload() for _ in range(3))
    return max(1.0, round(best / REFERENCE_WORKLOAD_S, 2))
