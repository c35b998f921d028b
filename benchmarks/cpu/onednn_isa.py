"""oneDNN on AMX CPUs (``evalsuite.cpu.onednn``): AMX kernels against the cap one level below, side by side in one run.

For each setting, fresh processes (oneDNN reads its level once):

* the batch-invariance probe at SmolLM2-135M's shapes in bf16 (``models.invariance.probe``);
* a prompt prefill of ``--prefill`` tokens and ``--steps`` decode steps at batch ``--batch`` over it (the embedded
  model, bf16, evalsuite's kernels), best of three;
* with ``--run``: a whole cold ``evalsuite run`` of the mission's grid (``--variants``) on ``--tasks`` at
  ``--limit`` samples: wall time, and per variant the share of samples that needed no decoding (``verified``).

    .venv/bin/python -m benchmarks.cpu.onednn_isa --run
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evalsuite.cpu.onednn import CAP, cpu_flags
from benchmarks.throughput.gate_time import evalsuite_cmd, same_wait_policy  # one OpenMP policy for every side

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {"AMX (oneDNN's own choice)": {},
            "capped (ONEDNN_MAX_CPU_ISA=AVX512_CORE_FP16)": {"ONEDNN_MAX_CPU_ISA": CAP}}

WORKER = r"""
import json, sys, time
import torch
from evalsuite.models.invariance import invariant
from evalsuite.models.loader import load_model

n_prefill, steps, batch = (int(a) for a in sys.argv[1:4])
loaded = load_model("default", dtype="bfloat16")
model = loaded.model
ok = invariant(model)
g = torch.Generator().manual_seed(0)
ids = torch.randint(100, 40000, (1, n_prefill), generator=g)


def best(fn):
    times = []
    for _ in range(3):
        t0 = time.perf_counter(); fn(); times.append(time.perf_counter() - t0)
    return min(times)


with torch.inference_mode():
    prefill = best(lambda: model(ids, use_cache=True))
    ctx = torch.randint(100, 40000, (batch, n_prefill // 2), generator=g)

    def decode():
        out = model(ctx, use_cache=True)
        cache, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        t0 = time.perf_counter()
        for _ in range(steps):
            out = model(tok, past_key_values=cache, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
        return time.perf_counter() - t0
    step = min(decode() for _ in range(2)) / steps
print(json.dumps({"invariant": ok, "prefill_s": prefill, "step_ms": step * 1e3}))
"""


def env_for(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")}
    return {**env, **extra}


def micro(args: argparse.Namespace, extra: dict[str, str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", WORKER, str(args.prefill), str(args.steps), str(args.batch)],
                         env=env_for(extra), capture_output=True, text=True, check=False)
    if out.returncode:
        sys.exit(f"worker exited {out.returncode}:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def whole_run(args: argparse.Namespace, extra: dict[str, str], work: Path, run_id: str) -> tuple[float, dict]:
    cmd = [*evalsuite_cmd(), "run", "--variants", args.variants, "--tasks", args.tasks, "--limit", str(args.limit),
           "--batch-size", str(args.batch), "--out", str(work), "--run-id", run_id, "--quiet"]
    env = {**env_for(extra), "EVALSUITE_BASELINES": str(work / "no-baselines"),
           "EVALSUITE_REPORTS": str(work / "reports")}
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if rc.returncode not in (0, 1):
        sys.exit(f"evalsuite run exited {rc.returncode}:\n{rc.stdout[-2000:]}{rc.stderr[-2000:]}")
    con = sqlite3.connect(work / run_id / "store.sqlite")
    shares = {v: f"{ok}/{n}" for v, ok, n in con.execute(
        "select variant, sum(decode = 'verified'), count(*) from samples group by variant")}
    return wall, shares


def flags() -> str:
    return " ".join(sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefill", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--run", action="store_true", help="also time a whole cold evalsuite run per setting")
    ap.add_argument("--variants", default="w4g64,kv4g32,w4g64+kv4g32")
    ap.add_argument("--tasks", default="json,reasoning,needle")
    ap.add_argument("--limit", type=int, default=8)
    args = ap.parse_args()
    policy = same_wait_policy()
    print(f"{os.cpu_count()} CPUs, flags {flags()}; bf16, SmolLM2-135M; OpenMP workers: {policy}")
    print(f"| setting | batch-invariant | prefill {args.prefill} tokens | decode step, batch {args.batch} "
          f"at {args.prefill // 2} tokens |" + (" whole run | no decoding needed |" if args.run else ""))
    print("|---|---|---|---|" + ("---|---|" if args.run else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, extra) in enumerate(SETTINGS.items()):
            m = micro(args, extra)
            row = f"| {label} | {m['invariant']} | {m['prefill_s']:.3f} s | {m['step_ms']:.1f} ms |"
            if args.run:
                wall, shares = whole_run(args, extra, Path(tmp), f"isa{i}")
                row += f" {wall:.1f} s | {', '.join(f'{v} {s}' for v, s in sorted(shares.items()))} |"
            print(row, flush=True)


if __name__ == "__main__":
    main()
