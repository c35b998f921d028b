"""OpenMP wait policy (``evalsuite.cpu.threads``): generation time with torch's workers spinning, sleeping (PASSIVE) or
single-threaded, each alone and as two processes at once, side by side in one run.

Each measurement is a fresh process that sets the policy before torch loads (the environment is read once), loads
the embedded model and generates ``--n`` samples of ``--task`` through the engine at batch ``--batch``; "two at
once" starts two such processes together and reports both.

    .venv/bin/python -m benchmarks.cpu.omp_wait --task json --n 8
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

WORKER = r"""
import sys, time
import torch  # loads libgomp with the environment this process was given
from evalsuite.core.config import RunConfig
from evalsuite.backends.inprocess.generate import iter_generate, shared_prefix_len
from evalsuite.models.loader import load_model
from evalsuite.run.prepare import prepare_tasks
from evalsuite.run.prompts import render_prompt
from evalsuite.tasks.registry import default_registry

task_name, n, batch, dtype, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
loaded = load_model("default", dtype=dtype)
params = {task_name: {"max_new_tokens": tokens}} if tokens else {}
task = prepare_tasks(RunConfig(tasks=[task_name], limit=n, task_params=params), default_registry())[0]
prompts = [render_prompt(s, loaded.tokenizer) for s in task.samples]
prefix = shared_prefix_len(loaded.tokenizer, prompts)
start = time.perf_counter()
for _ in iter_generate(loaded.model, loaded.tokenizer, prompts, task.gen, None, batch, prefix_len=prefix):
    pass
print(f"{time.perf_counter() - start:.2f}")
"""

POLICIES = {
    "spinning (libgomp default)": {"GOMP_SPINCOUNT": "300000"},
    "sleeping (OMP_WAIT_POLICY=PASSIVE)": {"OMP_WAIT_POLICY": "PASSIVE"},
    "one thread (OMP_NUM_THREADS=1)": {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"},
}


def start(args: argparse.Namespace, extra: dict[str, str]) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    argv = [args.task, str(args.n), str(args.batch), args.dtype, str(args.max_new_tokens)]
    return subprocess.Popen([sys.executable, "-c", WORKER, *argv],
                            env={**env, **extra}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def seconds(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate()
    if proc.returncode:
        sys.exit(f"worker exited {proc.returncode}")
    return out.strip().splitlines()[-1] + " s"


def cpu_flags() -> list[str]:
    """The vector-unit flags that decide CPU matmul speed here (empty without /proc/cpuinfo)."""
    from evalsuite.cpu.onednn import cpu_flags as all_flags

    return sorted(all_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="json")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--max-new-tokens", type=int, default=0, help="cap the task's answer length (0: the task's own)")
    args = ap.parse_args()
    print(f"{args.task}, {args.n} samples, batch {args.batch}; {os.cpu_count()} CPUs, flags {' '.join(cpu_flags())}")
    print("| policy | alone | two at once (each) |\n|---|---|---|")
    for label, extra in POLICIES.items():
        alone = seconds(start(args, extra))
        pair = [start(args, extra), start(args, extra)]
        print(f"| {label} | {alone} | {' / '.join(seconds(p) for p in pair)} |", flush=True)


if __name__ == "__main__":
    main()
