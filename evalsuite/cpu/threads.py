"""How torch's OpenMP threads wait between parallel regions: spin while the CPUs are ours, sleep when they are shared.

A decode step on the CPU is thousands of small operators, each an OpenMP parallel region. Between regions a
worker thread either spins (libgomp's default: up to ``GOMP_SPINCOUNT`` = 300,000 polls) or sleeps at once
(``OMP_WAIT_POLICY=PASSIVE``), and a sleeping worker has to be woken for the next region. Measured on a 2-core
AVX-512-BF16 EPYC with SmolLM2-135M in bf16 (json, 8 samples, batch 16; docs/architecture.md):

* alone on the machine: generation 8.6-11.6 s spinning against 18.7-19.6 s sleeping; a whole ``evalsuite run``
  (bf16, w4g64, kv4g32 on json, reasoning, needle at 8 samples) 108 s against 145 s;
* two such processes at once: 57 s each spinning against 12 s each sleeping (spinning threads hold a core the
  other process's thread needs, so every barrier waits for a scheduler slice).

So the policy follows the machine: ``choose_wait_policy`` samples ``/proc/stat`` for ``SAMPLE_S`` and sets
``OMP_WAIT_POLICY=PASSIVE`` when other processes keep more than ``BUSY_CORES`` cores busy, or when it cannot tell (no
``/proc/stat``). A variable the user set (``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``) is kept. The choice is made once:
a process that starts competing later is not seen. Thread count and arithmetic are unchanged, so results are too
(only waiting differs).

Who calls it: the command line (``evalsuite.cli.main``, ``evalsuite-lm-eval``), first thing, before torch loads:
libgomp reads these variables once, when torch loads it. Importing evalsuite does not (a library must not change its
host process), so a program that uses evalsuite as a library keeps whatever libgomp read when *it* imported torch
(libgomp's bounded spin unless it set the variables): call ``choose_wait_policy()`` before importing torch to get
the command line's behaviour.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, MutableMapping

SAMPLE_S = 0.05  #: how long the CPUs are watched at import
BUSY_CORES = 0.5  #: other processes keeping more than this many cores busy make the threads sleep
_USER_SET = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def cpu_times(stat: str) -> tuple[float, float]:
    """(busy, total) jiffies of the aggregate ``cpu`` line of ``/proc/stat`` text (idle and iowait are not
    busy; steal is: the hypervisor gave the core to someone else)."""
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [float(v) for v in fields[1:9]]
            idle = values[3] + values[4]
            return sum(values) - idle, sum(values)
    raise ValueError("no aggregate cpu line in /proc/stat")


def busy_cores(before: str, after: str, cores: int) -> float:
    """How many cores were busy on average between two ``/proc/stat`` readings."""
    b0, t0 = cpu_times(before)
    b1, t1 = cpu_times(after)
    return (b1 - b0) / (t1 - t0) * cores if t1 > t0 else 0.0


def wait_policy(busy: float | None) -> str | None:
    """``PASSIVE`` when ``busy`` cores (None: unknown) exceed ``BUSY_CORES``, else None (libgomp's bounded spin)."""
    return "PASSIVE" if busy is None or busy > BUSY_CORES else None


def measure_busy(sample_s: float = SAMPLE_S) -> float | None:
    """Cores busy over ``sample_s`` seconds (this process idles meanwhile), None where ``/proc/stat`` is absent."""
    try:
        with open("/proc/stat") as fh:
            before = fh.read()
        time.sleep(sample_s)
        with open("/proc/stat") as fh:
            after = fh.read()
        return busy_cores(before, after, os.cpu_count() or 1)
    except (OSError, ValueError):
        return None


def choose_wait_policy(env: MutableMapping[str, str] | None = None,
                       measure: Callable[[], float | None] = measure_busy) -> str | None:
    """Set ``OMP_WAIT_POLICY`` in ``env`` (default ``os.environ``) from the cores ``measure`` finds busy, unless
    the user set a waiting variable; returns the policy in force (None: libgomp's default spin)."""
    env = os.environ if env is None else env
    if any(name in env for name in _USER_SET):
        return env.get("OMP_WAIT_POLICY")
    policy = wait_policy(measure())
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    return policy
