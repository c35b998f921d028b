"""Verified answers against regenerated ones on the embedded model: the exactness check of ``run.verify``.

Runs the same variants on the same samples twice in one process, ``--verify on`` and ``--verify off`` (the baseline
is generated once and shared), and prints per variant: the share of samples whose verified answer equals the
regenerated one, how each verified row was obtained (verified / diverged), the near-tie share of checked answer
positions, the mean KLD of both runs (the verify pass vs the old answer chunk) and both wall times.

    .venv/bin/python -m benchmarks.verify.verify_agreement --dtype float32 --limit 24 --tasks reasoning,json
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from evalsuite.models.loader import load_model
from evalsuite.core.config import RunConfig
from evalsuite.backends.inprocess.inprocess import InProcessBackend
from evalsuite.run.pipeline import execute
from evalsuite.store.sqlite import Store
from evalsuite.variants.spec import parse_variant

VARIANTS = "w4g64,kv4g32r16,kv2g32r32kt,kvf8e4g0r16,kv4g32r16pq,w4g64+kv4g32r16"


def run_once(loaded, args: argparse.Namespace, verify: bool, out: Path, batch: int | None = None
             ) -> tuple[Store, float]:
    config = RunConfig(model="default", dtype=args.dtype, variants=["bf16"] + args.variants.split(","),
                       tasks=args.tasks.split(","), limit=args.limit, batch_size=batch or args.batch_size,
                       verify=verify,
                       task_params={"needle": {"context_lens": [600, 1200]}} if "needle" in args.tasks else {})
    start = time.perf_counter()
    store = execute(config, out, False, InProcessBackend.of(loaded, seed=config.seed), progress=False,
                    log=lambda s: None)
    return store, time.perf_counter() - start


def variant_rows(on: Store, off: Store, name: str) -> str:
    a = {(r.task, r.sample_id): r for r in on.samples(name)}
    b = {(r.task, r.sample_id): r for r in off.samples(name)}
    keys = sorted(a.keys() & b.keys())
    same = sum(a[k].output == b[k].output for k in keys)
    verified = sum(a[k].decode == "verified" for k in keys)
    diverged = sum(a[k].decode.startswith("diverged") for k in keys)
    tally = on.meta().get("verify", {}).get(name, {})
    pos = sum(t["positions"] for t in tally.values()) or 1
    ties = sum(t["near_ties"] for t in tally.values())
    kld_on = statistics.fmean(k.mean for k in on.kld(name)) if on.kld(name) else float("nan")
    kld_off = statistics.fmean(k.mean for k in off.kld(name)) if off.kld(name) else float("nan")
    return (f"| {name} | {same}/{len(keys)} ({same / max(len(keys), 1):.1%}) | {verified} | {diverged} | "
            f"{ties}/{pos} ({ties / pos:.2%}) | {kld_on:.4f} | {kld_off:.4f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--variants", default=VARIANTS)
    ap.add_argument("--tasks", default="reasoning,json")
    ap.add_argument("--limit", type=int, default=24)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--noise-batch", type=int, default=0,
                    help="also regenerate at this batch size: how often regeneration agrees with itself")
    args = ap.parse_args()
    loaded = load_model("default", args.dtype, "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        on, t_on = run_once(loaded, args, True, Path(tmp) / "on")
        off, t_off = run_once(loaded, args, False, Path(tmp) / "off")
        print(f"dtype {args.dtype}, tasks {args.tasks}, {args.limit} samples per task; wall: verify on {t_on:.1f} s, "
              f"off {t_off:.1f} s (both include the baseline, generated in each run)")
        print("| variant | verified-run answer = regenerated | verified | diverged | near-tie positions | "
              "KLD (verify pass) | KLD (answer chunk) |")
        print("|---|---|---|---|---|---|---|")
        names = [parse_variant(v).name for v in args.variants.split(",")]  # as stored: kv4g32 -> kv4g32r128
        for name in names:
            print(variant_rows(on, off, name))
        if args.noise_batch:
            other, _ = run_once(loaded, args, False, Path(tmp) / "noise", args.noise_batch)
            print(f"regenerated at batch {args.noise_batch} vs batch {args.batch_size} (the noise floor of regeneration):")
            for name in names:
                a = {(r.task, r.sample_id): r.output for r in other.samples(name)}
                b = {(r.task, r.sample_id): r.output for r in off.samples(name)}
                same = sum(a[k] == b[k] for k in a.keys() & b.keys())
                print(f"| {name} | {same}/{len(a.keys() & b.keys())} identical |")


if __name__ == "__main__":
    main()
