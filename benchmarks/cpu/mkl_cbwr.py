"""float32 matmuls in MKL's default mode against its strict mode (``evalsuite.cpu.mkl``), side by side in one run.

Each mode runs in its own fresh process (MKL reads ``MKL_CBWR`` once), alternating ``--rounds`` times: the float32
batch-invariance probe at SmolLM2-135M's shapes, then GFLOP/s of a prefill-sized GEMM (2,048 x 576 -> 1,536) and
microseconds per decode-sized call (16 x 576 -> 1,536). Prints the median of each and the strict / default ratio.

    .venv/bin/python -m benchmarks.cpu.mkl_cbwr --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from evalsuite.cpu.onednn import cpu_flags

CHILD = r"""
import json, time, torch
import torch.nn.functional as F
from evalsuite.models.invariance import probe
ok = probe(torch.float32, ((576, 192), (576, 576), (576, 1536), (1536, 576), (576, 49152)), 64).ok
w = torch.randn(1536, 576)
def per_call(x, n):
    for _ in range(3):
        F.linear(x, w)
    t = time.perf_counter()
    for _ in range(n):
        F.linear(x, w)
    return (time.perf_counter() - t) / n
big = per_call(torch.randn(2048, 576), 20)
small = per_call(torch.randn(16, 576), 200)
print(json.dumps({"invariant": ok, "gflops": 2 * 2048 * 576 * 1536 / big / 1e9, "small_us": small * 1e6}))
"""


def measure(mode: str | None) -> dict[str, float]:
    """One fresh process in MKL's ``mode`` (None: MKL's own default: the variable unset, and MKL called once
    before evalsuite is imported, so evalsuite's choice comes too late to apply)."""
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    head = "import evalsuite\n"
    if mode is None:
        head = "import torch\ntorch.mm(torch.randn(4, 4), torch.randn(4, 4))\n" + head
    else:
        env["MKL_CBWR"] = mode
    out = subprocess.run([sys.executable, "-c", head + CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    modes = {"MKL default (unset)": None, "strict (MKL_CBWR=AUTO,STRICT)": "AUTO,STRICT"}
    got: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for label, mode in modes.items():
            got[label].append(measure(mode))
    flags = sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"})
    print(f"CPU flags: {' '.join(flags)}; {args.rounds} alternating rounds, medians")
    print("| mode | float32 probe passes | GEMM 2048x576x1536 GFLOP/s | 16-row call us |")
    print("|---|---|---|---|")
    med = {}
    for label, rows in got.items():
        med[label] = (statistics.median(r["gflops"] for r in rows), statistics.median(r["small_us"] for r in rows))
        passes = sum(bool(r["invariant"]) for r in rows)
        print(f"| {label} | {passes}/{len(rows)} | {med[label][0]:.0f} | {med[label][1]:.0f} |")
    (d_g, d_s), (s_g, s_s) = med.values()
    print(f"strict / default: GEMM throughput {s_g / d_g:.2f}x, 16-row call time {s_s / d_s:.2f}x")


if __name__ == "__main__":
    main()
