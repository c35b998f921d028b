"""The suite's own checks, imported by tests/conftest.py: markers follow the expensive fixtures, a test that stays
in ``make test-fast`` must stay cheap, and ``make test`` shows what its set-up steps cost.

* A test that uses the embedded model or a real server through a fixture gets that fixture's marker at collection
  (``HEAVY_FIXTURES``), so ``-m "not embedded and not server ..."`` (``make test-fast``) leaves it out whatever its
  author wrote.
* A test without a heavy marker (``HEAVY_MARKS``) that spends more than ``EVALSUITE_TEST_CPU_BUDGET_S`` CPU-seconds
  (its body, its function- and module-scoped fixtures and the subprocesses it waits for; session fixtures are
  shared and not counted) is listed at the end of the run, naming the budget: mark it, or make it cheaper. It
  fails only where the budget is enforced (``make test-fast`` sets ``EVALSUITE_TEST_CPU_BUDGET_ENFORCE=1``): a
  slower CPU running ``make test`` (CI) is not a failing test. CPU time, not wall time, so a busy machine does not
  trip it. The budget (20 CPU-s) is ten times the costliest unmarked test measured on a
  2-core Xeon, room for a slower CPU and for one-off costs a test may happen to pay first (a module's import, a
  font cache); tests that cost more than ~2 CPU-s there are marked ``slow``, which keeps ``make test-fast`` near
  2 minutes.
* Every test using a server fixture (``SERVER_FIXTURES``) lives in one module, or collection stops: pytest-xdist
  (``--dist loadscope``) gives whole modules to a worker, so each server starts once per run.
* After collection everything built so far is frozen out of the garbage collector's sight (``gc.freeze``).
* ``EVALSUITE_STEP_TIMES`` (set by ``make test``): a file of ``NAME SECONDS`` lines that the summary prints with
  the machine's CPU flags, next to pytest's ``--durations``.
"""
from __future__ import annotations

import gc
import os
import resource
from pathlib import Path

import pytest

#: markers that keep a test out of ``make test-fast`` (and exempt it from the CPU budget)
HEAVY_MARKS = ("embedded", "server", "vllm", "llmc", "slow")
#: fixtures whose users get a marker: the embedded model, real servers, llm-compressor artifacts
HEAVY_FIXTURES = {"embedded": "embedded", "vllm_servers": "vllm", "vllm_python_path": "vllm",
                  "llama_servers": "server", "llmc_artifacts": "llmc"}
#: session fixtures that start servers (or make artifacts): every test using one lives in one module, so that
#: pytest-xdist's ``--dist loadscope`` (whole modules to one worker) starts each once per run
SERVER_FIXTURES = ("vllm_servers", "llama_servers", "llmc_artifacts")
CPU_BUDGET_S = float(os.environ.get("EVALSUITE_TEST_CPU_BUDGET_S", "20"))
#: whether a test over the budget fails (``make test-fast``) or is only listed in the summary (``make test``)
ENFORCE_BUDGET = os.environ.get("EVALSUITE_TEST_CPU_BUDGET_ENFORCE", "") not in ("", "0")
_OVER: list[str] = []


def cpu_seconds() -> float:
    """User + system CPU of this process (all its threads) and of the children it has waited for."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    modules: dict[str, set[str]] = {f: set() for f in SERVER_FIXTURES}
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for fixture in used & HEAVY_FIXTURES.keys():
            if not item.get_closest_marker(HEAVY_FIXTURES[fixture]):
                item.add_marker(HEAVY_FIXTURES[fixture])
        for fixture in used & modules.keys():
            modules[fixture].add(item.nodeid.split("::")[0])
    spread = {f: sorted(m) for f, m in modules.items() if len(m) > 1}
    if spread:
        raise pytest.UsageError(f"tests using a server fixture must live in one module (pytest-xdist would start it "
                                f"once per worker): {spread}")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection built (torch, transformers, lm-eval, every test module: millions of objects) out of
    the garbage collector's sight: the Runner's ``gc.collect()`` after each variant then walks only what tests made
    (measured: 0.22 s per collect before, a quarter of tests/run/test_verified.py's CPU time)."""
    gc.collect()
    gc.freeze()


def heavy(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) for m in HEAVY_MARKS)


_COST = {"start": 0.0, "shared": 0.0}  # the running test's CPU clock at its set-up, and session fixtures' share


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
    start = cpu_seconds()
    yield
    if fixturedef.scope == "session":  # shared by the whole run: not this test's cost
        _COST["shared"] += cpu_seconds() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    _COST.update(start=cpu_seconds(), shared=0.0)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if call.when != "call":
        return
    spent = cpu_seconds() - _COST["start"] - _COST["shared"]
    item.user_properties.append(("cpu_s", round(spent, 2)))  # junitxml writes it
    if report.passed and not heavy(item) and spent > CPU_BUDGET_S:
        why = (f"{item.nodeid} spent {spent:.1f} CPU-s, over the {CPU_BUDGET_S:g} CPU-s budget of a "
               f"test that `make test-fast` runs: mark it ({', '.join(HEAVY_MARKS)}) or make it "
               f"cheaper (tests/suite_checks.py; EVALSUITE_TEST_CPU_BUDGET_S)")
        if ENFORCE_BUDGET:
            report.outcome, report.longrepr = "failed", why
        else:
            report.sections.append(("CPU budget", why))
            _OVER.append(why)


def machine_line() -> str:
    """The CPU's model, cores and the flags that decide kernels (AVX2, AVX-512, AMX)."""
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown CPU":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    shown = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    told = os.environ.get("EVALSUITE_CPU_FLAGS", "").strip()
    return (f"{model}, {os.cpu_count()} cores, flags: {' '.join(shown) or 'none of avx2/avx512/amx'}"
            + (f"; evalsuite is told EVALSUITE_CPU_FLAGS={told!r}" if told else ""))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    over = _OVER + [text for r in terminalreporter.stats.get("passed", []) for name, text in r.sections
                    if name == "CPU budget" and text not in _OVER]  # xdist: the workers' reports
    if over:
        terminalreporter.write_sep("=", f"{len(over)} unmarked test(s) over the CPU budget (not failed)")
        for line in over:
            terminalreporter.write_line(line)
    path = os.environ.get("EVALSUITE_STEP_TIMES")
    if not path or not Path(path).is_file():
        return
    steps = [line.split() for line in Path(path).read_text().splitlines() if len(line.split()) == 2]
    tr = terminalreporter
    tr.write_sep("=", "make test: set-up steps (wall)")
    tr.write_line(machine_line())
    for name, secs in steps:
        tr.write_line(f"{float(secs):8.1f} s  {name}")
    tr.write_line(f"{sum(float(s) for _, s in steps):8.1f} s  set-up in all (pytest's own time: the last line)")
