"""OpenMP wait policy from the machine's load (evalsuite.cpu.threads)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from evalsuite.cpu import threads

STAT = "cpu  {user} 0 {system} {idle} {iowait} 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1\n"


def stat(user: int, system: int, idle: int, iowait: int = 0, steal: int = 0) -> str:
    return STAT.format(user=user, system=system, idle=idle, iowait=iowait, steal=steal)


def test_busy_cores_counts_user_system_and_steal_not_idle_or_iowait() -> None:
    before = stat(100, 50, 1000, iowait=10, steal=0)
    after = stat(100 + 60, 50 + 20, 1000 + 100, iowait=10 + 10, steal=10)  # 90 busy of 200 jiffies
    assert threads.busy_cores(before, after, cores=2) == pytest.approx(0.9)
    assert threads.busy_cores(before, before, cores=2) == 0.0


def test_cpu_times_needs_the_aggregate_line() -> None:
    with pytest.raises(ValueError):
        threads.cpu_times("cpu0 1 2 3 4 5 6 7 8\n")


@pytest.mark.parametrize("busy, policy", [(0.0, None), (0.4, None), (0.6, "PASSIVE"), (1.9, "PASSIVE"),
                                          (None, "PASSIVE")])
def test_threads_sleep_when_other_processes_keep_cores_busy(busy: float | None, policy: str | None) -> None:
    env: dict[str, str] = {}
    assert threads.choose_wait_policy(env, lambda: busy) == policy
    assert env.get("OMP_WAIT_POLICY") == policy


@pytest.mark.parametrize("name, value", [("OMP_WAIT_POLICY", "ACTIVE"), ("GOMP_SPINCOUNT", "1000")])
def test_a_variable_the_user_set_is_kept(name: str, value: str) -> None:
    env = {name: value}
    threads.choose_wait_policy(env, lambda: 2.0)
    assert env == {name: value}


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs /proc/stat")
def test_the_command_line_next_to_a_busy_process_makes_threads_sleep() -> None:
    """The policies the command line chooses first (``evalsuite.cli.process_policies``) see the busy core;
    importing evalsuite alone chooses nothing."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    code = ("import os, time; time.sleep(0.3); import evalsuite; before = os.environ.get('OMP_WAIT_POLICY'); "
            "from evalsuite.cli import process_policies; process_policies(); "
            "print(before, os.environ.get('OMP_WAIT_POLICY'))")
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                             timeout=60)
    finally:
        spinner.kill()
        spinner.wait()
    assert out.stdout.split() == ["None", "PASSIVE"]
