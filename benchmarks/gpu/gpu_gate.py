"""GPU check: evalsuite's CUDA paths end to end on one GPU, exiting 0 only when every step asked for ran and passed.

Steps (``--steps``, comma-separated; the default is every step below, ``vllm`` only where a Python with vLLM is
found). Each has its own timeout (``STEPS``); together the default ones fit in 8 minutes.

* ``env``: the GPU, torch, transformers, and every package the check imports (the bundle's wheels installed).
* ``model``: the bundle's GGUF (``benchmarks/gpu/gpu_bundle.py``: SmolLM2-135M cut to 8 of its 30 layers, real
  weights; else the embedded model) converted to an HF folder, then a copy with a 16k window (YaRN RoPE scaling,
  factor 2 over the original 8,192 positions; the weights linked).
* ``refusal``: ``--weight-kernels quanto --variants w4g64`` on CUDA is refused in one line, exit 2, before the
  model loads (it would need optimum-quanto's quanto_cuda extension, built with nvcc at first use).
* ``in-process``: ``evalsuite run --device cuda``: ``w4g64`` (``--weight-kernels dequantized``: frozen and unpacked
  on the CPU, no build) and ``kv4g32`` against bf16 on reasoning, json and needles at 2,048 and 16,000 tokens, the
  baseline stored (``--store-baseline``) with its prompt K/V spilled to disk.
* ``spill``: a second run against that stored baseline (``kv8``): its KLD and verification passes read the
  baseline's prompt K/V back from disk onto the GPU.
* ``cuda-tests``: pytest on ``benchmarks/gpu/cuda_tests.txt``; a test skipped for want of CUDA fails the step.
* ``decode``: decode speed and memory on a random model of Llama-3-8B's shape, built on the GPU, against
  ``evalsuite plan`` (``benchmarks/gpu/gpu_decode.py``, contexts 4,096 and 16,384).
* ``vllm``: ``vkvf8`` against vLLM bf16 on the same tasks (servers eager).

A step that was asked for and did not run (a missing package, no GPU) fails the check: only ``vllm`` left to its
default is skipped quietly where vLLM is absent. A FAIL or INCONCLUSIVE verdict is a result, not a failure. Last, a
table: each step's status, verdicts, wall time and peak GPU memory (``nvidia-smi`` every 0.5 s, over the use before
the step; on the CPU the peak resident memory of its processes), also written to ``$OUT/gpu_gate.md``.

    python -m benchmarks.gpu.gpu_gate             # on a CUDA machine (benchmarks/gpu/gpu_gate.sh sets it up)
    python -m benchmarks.gpu.gpu_gate --dry-run   # the bundle's size and the steps, nothing run
    python -m benchmarks.gpu.gpu_gate --tiny      # the CPU: a few samples, short needles (tests run it)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from benchmarks.gpu.gpu_bundle import DEFAULT_DIR, LIMIT, bundle_model, files, travelling_tree
from benchmarks.gpu.gpu_steps import summary

ROOT = Path(__file__).resolve().parents[2]
#: name -> (timeout s, what it checks); the default steps' timeouts add up to 8 minutes
STEPS = {"env": (30, "the GPU, torch, transformers and every package the check imports"),
         "model": (45, "the bundle's GGUF converted, then stretched to a 16k window (YaRN)"),
         "refusal": (45, "--weight-kernels quanto w4g64 refused in one line (exit 2) before the model loads"),
         "in-process": (120, "w4g64 (unpacked on the CPU, no build) and kv4g32 vs bf16 on CUDA: reasoning, json, "
                             "needles at 2k and 16k; baseline stored with its prompt K/V"),
         "spill": (60, "kv8 against the stored baseline: its prompt K/V read back from disk onto the GPU"),
         "cuda-tests": (90, "pytest on benchmarks/gpu/cuda_tests.txt (a test skipped for want of CUDA fails)"),
         "decode": (90, "decode speed and memory, random Llama-3-8B shape, vs evalsuite plan"),
         "vllm": (210, "vkvf8 vs vLLM bf16 on the same tasks (only where vLLM is installed)")}
TINY_STEPS = ("env", "model", "in-process", "spill", "decode", "vllm")
#: ``--tiny`` runs on a CPU, often a small shared one: its step timeouts are the GPU's times this (they guard the
#: GPU session's minutes, not the CPU rehearsal's)
TINY_TIMEOUT_SCALE = 4


def requested(args: argparse.Namespace) -> dict[str, bool]:
    """Step name -> whether it counts towards the exit status (asked for by name, or a default step other than
    ``vllm``) ; steps not listed do not run."""
    if args.steps:
        names = [s.strip() for s in args.steps.split(",") if s.strip()]
        unknown = [n for n in names if n not in STEPS]
        if unknown:
            raise SystemExit(f"unknown step {unknown[0]!r}: choose from {', '.join(STEPS)}")
        return {n: True for n in names}
    names = TINY_STEPS if args.tiny else tuple(STEPS)
    return {n: not (n == "vllm" and args.vllm_python is None) for n in names if not (n == "vllm" and args.no_vllm)}


def gguf_source(args: argparse.Namespace) -> Path | None:
    """The model to check: ``--gguf``, else the bundle's, else None (the embedded one, where it is installed)."""
    return args.gguf or bundle_model(args.bundle)


def dry_run(args: argparse.Namespace, steps: dict[str, bool]) -> int:
    """Print what would travel (the bundle, the checkout) against the limit, and the steps; 1 if it does not fit or
    the bundle is missing."""
    have = files(args.bundle) if args.bundle.is_dir() else {}
    size, tree = sum(have.values()), travelling_tree()
    print(f"bundle {args.bundle}: {len(have)} files, {size / 2**20:.2f} MiB" + ("" if have else " (missing: make "
                                                                                           "gpu-bundle)"))
    for name in ("MANIFEST.json", *[p for p in have if p.startswith("model/")]):
        if name in have:
            print(f"  {name}: {have[name] / 2**20:.2f} MiB")
    wheels = [p for p in have if p.startswith("wheels/")]
    print(f"  wheels/: {len(wheels)} wheels, {sum(have[p] for p in wheels) / 2**20:.2f} MiB")
    total = size + tree
    print(f"checkout that travels: {tree / 2**20:.2f} MiB; together {total / 2**20:.2f} MiB of {LIMIT >> 20} MiB "
          f"({'fits' if total <= LIMIT else 'DOES NOT FIT'})")
    print("steps that would run (timeout s; counts towards the exit status):")
    for name, counts in steps.items():
        timeout, what = STEPS[name]
        print(f"  {name:11s} {timeout:4d}  {'yes' if counts else 'no (runs only where vLLM is found)'}  {what}")
    print(f"timeouts of the steps that count: {sum(STEPS[n][0] for n, c in steps.items() if c)} s")
    return 0 if have and total <= LIMIT else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", help=f"comma-separated, from: {', '.join(STEPS)} (default: all; vllm where found)")
    ap.add_argument("--tiny", action="store_true", help="the CPU, a few samples, short needles")
    ap.add_argument("--dry-run", action="store_true", help="print the bundle's size and the steps; run nothing")
    ap.add_argument("--no-vllm", action="store_true", help="leave the vLLM step out")
    ap.add_argument("--vllm-python", help="Python with vLLM (asks for the vllm step; else evalsuite's order)")
    ap.add_argument("--bundle", type=Path, default=Path(os.environ.get("GPU_BUNDLE") or DEFAULT_DIR))
    ap.add_argument("--gguf", type=Path, help="the model (default: the bundle's, else the embedded one)")
    ap.add_argument("--work", type=Path, help="working folder (default: a temporary one)")
    args = ap.parse_args(argv)
    steps = requested(args)
    if args.dry_run:
        return dry_run(args, steps)
    from benchmarks.gpu.gpu_steps import Check

    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-gate-"))
    scale = TINY_TIMEOUT_SCALE if args.tiny else 1
    check = Check(args, work, gguf_source(args), {n: t * scale for n, (t, _) in STEPS.items()})
    done = [check.run(name) for name in steps]
    for step in done:
        step.required = steps[step.name]
    table = summary(done)
    print("\n" + table, flush=True)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gpu_gate.md").write_text(table + "\n")
    return 1 if any(s.required and s.status != "ok" for s in done) else 0


if __name__ == "__main__":
    sys.exit(main())
