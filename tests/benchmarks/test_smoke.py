"""Every benchmark script runs at its smallest size and exits 0 (``make test``; its cases are marked ``slow``,
``embedded`` or ``server``, so ``make test-fast`` leaves them out). A script that needs what this machine lacks (a GPU,
AMX, oneDNN bf16 matmuls, llama.cpp, the network) is skipped with the reason. The unmarked test checks that every
script under benchmarks/ has a case here and an argparse description, without running anything."""
from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
#: modules other scripts run or source, not scripts themselves: what runs each
HELPERS = {"sim/gate_simulation_kld.py": "sim/gate_simulation_tasks.py --kld",
           "gpu/gpu_steps.py": "gpu/gpu_gate.py", "gpu/gpu_env.sh": "gpu/gpu_gate.sh"}


def cpu_flags() -> set[str]:
    """This CPU's flags (empty without /proc/cpuinfo)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return next((set(line.split(":", 1)[1].split()) for line in text.splitlines() if line.startswith("flags")), set())


def needs_amx() -> str | None:
    return None if "amx_tile" in cpu_flags() else "needs an AMX CPU (amx_tile): it times AMX against the cap below"


def needs_onednn_bf16() -> str | None:
    from evalsuite.models import packed

    return None if packed.supported() else "needs oneDNN bf16 matmuls (AVX-512-BF16 or AMX), which this CPU lacks"


def needs_llama_cpp() -> str | None:
    found = importlib.util.find_spec("llama_cpp") is not None
    return None if found else "needs llama-cpp-python's server (make server-deps)"


def needs_bundle() -> str | None:
    bundle = ROOT / ".cache" / "gpu-bundle"
    return None if bundle.is_dir() else f"needs the GPU bundle ({bundle.relative_to(ROOT)}: make gpu-bundle)"


def needs_network() -> str | None:
    return "fetches wheels with pip download (the network) into .cache/gpu-bundle: make gpu-bundle runs it"


@dataclass(frozen=True)
class Case:
    """One script at its smallest size: ``script`` under benchmarks/, its arguments, its marker, what it needs."""
    script: str
    args: tuple[str, ...] = ()
    mark: str = "slow"
    needs: Callable[[], str | None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    stale: str = ""  #: why the script no longer runs (an expected failure until it is fixed or removed)

    def command(self, tmp: Path) -> list[str]:
        args = [a.replace("{tmp}", str(tmp)) for a in self.args]
        if self.script.endswith(".sh"):
            return ["bash", str(BENCH / self.script), *args]
        module = "benchmarks." + self.script.removesuffix(".py").replace("/", ".")
        return [sys.executable, "-m", module, *args]


NO_BUNDLE = {"GPU_BUNDLE": "{tmp}/no-bundle", "WHEELS": "{tmp}/no-wheels"}
CASES = [
    Case("sim/gate_oracle.py"),
    Case("sim/gate_simulation.py", ("--reps", "4", "--cap", "40", "--check", "1")),
    Case("sim/gate_simulation_tasks.py", ("--reps", "2", "--boundary-reps", "2", "--churn", "0.05", "--kld", "2")),
    Case("sim/gate_schedule_simulation.py", ("--reps", "1", "--boundary-reps", "1", "--churn", "0.05", "--budgets",
                                             "540", "--cap", "64", "--first-look-reps", "1", "--shaped-reps", "0")),
    Case("gating/look_cost.py", ("--n", "16", "--chunk", "4", "--repeat", "1")),
    Case("gating/compare_logs.py", ("--n", "40", "--keep", "{tmp}/cmp")),
    Case("gating/pair_signal.py", ("{tmp}/run", "--variant", "w4g32")),
    Case("gpu/gpu_decode.py", ("--tiny", "--device", "cpu", "--contexts", "32", "--decode-tokens", "1")),
    Case("gpu/gpu_gate.py", ("--dry-run",), needs=needs_bundle),
    Case("gpu/gpu_gate.sh", ("--dry-run",), needs=needs_bundle),
    Case("gpu/gpu_check.sh", ("--tiny",), env=NO_BUNDLE),
    Case("gpu/gpu_bundle.py", ("--out", "{tmp}/bundle"), needs=needs_network),
    Case("verify/row_rebuild.py", ("--tokens", "64", "--rows", "1", "--repeat", "1")),
    Case("verify/kld_snapshot.py", ("--task", "reasoning", "--n", "1", "--repeats", "1", "--dtype", "float32"),
         mark="embedded", stale="BaselineLogprobCache no longer takes prompt_bytes (the prompt snapshot moved to "
         "teacher_forced_kld's var_snapshot / base_snapshot)"),
    Case("verify/verify_cost.py", ("--task", "reasoning", "--n", "2", "--variant", "w4g32", "--dtype", "float32"),
         mark="embedded"),
    Case("verify/verify_plan.py", ("--task", "reasoning", "--n", "2", "--variant", "kv4g32", "--batch", "2",
                                   "--repeat", "1", "--dtype", "float32"), mark="embedded"),
    Case("verify/tail_cost.py", ("--task", "reasoning", "--n", "2", "--batch", "2", "--repeat", "1", "--dtype",
                                 "float32", "--param", "reasoning.max_new_tokens=16"), mark="embedded"),
    Case("verify/verify_agreement.py", ("--tasks", "reasoning", "--limit", "1", "--variants", "w4g64",
                                        "--batch-size", "2", "--dtype", "float32"), mark="embedded"),
    Case("cpu/mkl_cbwr.py", ("--rounds", "1")),
    Case("cpu/onednn_isa.py", ("--prefill", "32", "--steps", "1", "--batch", "1"), mark="embedded", needs=needs_amx),
    Case("cpu/packed_linear.py", ("--rounds", "1", "--batches", "1", "--contexts", "16"), mark="embedded",
         needs=needs_onednn_bf16),
    Case("cpu/omp_wait.py", ("--task", "reasoning", "--n", "1", "--batch", "1", "--dtype", "float32",
                             "--max-new-tokens", "8"), mark="embedded"),
    Case("cpu/fp32_decode.py", ("--task", "reasoning", "--n", "1", "--batch", "1", "--context", "16", "--rows", "1",
                                "--rounds", "1", "--gen-rounds", "1"), mark="embedded"),
    Case("cpu/decode_attention.py", ("--task", "reasoning", "--n", "2", "--batch", "2", "--dtype", "float32",
                                     "--cap", "32", "--param", "reasoning.max_new_tokens=16"), mark="embedded"),
    Case("throughput/kv_cache.py", ("--contexts", "32", "--decode-tokens", "1", "--dtype", "float32"),
         mark="embedded"),
    Case("throughput/prompt_reuse.py", ("--n", "1", "--context", "256", "--dtype", "float32"), mark="embedded"),
    Case("throughput/stop_rules.py", ("--n", "1", "--tasks", "reasoning", "--batch", "1", "--rounds", "1"),
         mark="embedded"),
    Case("throughput/throughput.py", ("--task", "reasoning", "--n", "1", "--batch-size", "1", "--dtype", "float32",
                                      "--lm-eval-batches", "1"), mark="embedded"),
    Case("throughput/gate_time.py", ("--tasks", "reasoning", "--n", "1", "--variants", "bf16,w4g64", "--dtype",
                                     "float32", "--batch-size", "1", "--lm-eval-batch", "1"), mark="embedded"),
    Case("throughput/endpoint_throughput.py", ("--task", "reasoning", "--n", "1", "--batch", "1", "--concurrency",
                                               "1"), mark="server", needs=needs_llama_cpp),
]


def scripts() -> list[str]:
    """Every script and helper under benchmarks/, relative to it."""
    return sorted(str(p.relative_to(BENCH)) for p in [*BENCH.rglob("*.py"), *BENCH.rglob("*.sh")]
                  if p.name != "__init__.py")


def test_every_script_has_a_smoke_case_and_says_what_it_measures():
    cased = [c.script for c in CASES]
    assert len(cased) == len(set(cased)), "a script with two cases"
    assert sorted({*cased, *HELPERS}) == scripts(), "a script without a smoke case here (or a case for none)"
    for name in cased:
        if name.endswith(".py"):
            tree = ast.parse((BENCH / name).read_text())
            assert ast.get_docstring(tree), f"{name}: no docstring"
            calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") ==
                     "ArgumentParser"]
            assert any(k.arg == "description" for c in calls for k in c.keywords), f"{name}: no --help description"


def _param(case: Case):
    marks = [getattr(pytest.mark, case.mark)]
    if case.stale:
        marks.append(pytest.mark.xfail(reason=f"stale: {case.stale}", strict=True))
    return pytest.param(case, id=case.script, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_script_runs_at_its_smallest_size(case: Case, tmp_path: Path) -> None:
    why = case.needs() if case.needs else None
    if why:
        pytest.skip(f"benchmarks/{case.script}: {why}")
    if case.script == "gating/pair_signal.py":  # a committed stored run, copied: opening a store may write to it
        shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "sequential" / "run", tmp_path / "run")
    env = {**{k: v for k, v in os.environ.items() if k != "OUT"}, "PYTHON": sys.executable}  # the .sh scripts' Python
    env.update({k: v.replace("{tmp}", str(tmp_path)) for k, v in case.env.items()})
    proc = subprocess.run(case.command(tmp_path), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
