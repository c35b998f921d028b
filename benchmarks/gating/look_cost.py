"""What one look of a sequential run costs in gating (issue 65): a synthetic stored run of a baseline and 3 variants
on 4 binary tasks of n pairs each (default 240: with three slice keys and KLD rows, as a run stores them), gated the way
the runner's decision function gates it after a chunk (``evalsuite.gate.decide.store_decider``). Prints the seconds
(wall and this process's CPU) of the first look (nothing gated yet) and of a look after one chunk of ``--chunk``
new pairs of one task (the baseline and every variant), the median of ``--repeat`` runs each.

    python -m benchmarks.gating.look_cost [--n 240] [--chunk 16] [--repeat 5]
"""
from __future__ import annotations

import argparse
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS = ("bf16", "w8", "w4g32", "w2g32")  #: the baseline first
TASKS = ("alpha", "beta", "gamma", "delta")
FLIP = {"bf16": 0.0, "w8": 0.02, "w4g32": 0.08, "w2g32": 0.3}  #: chance that a variant's answer flips


def meta(i: int) -> dict[str, Any]:
    """Sample ``i``'s metadata: three keys the gate slices by, as a needle task's (11 slices besides ``all``)."""
    return {"length": "long" if i % 3 == 0 else "short", "depth": (i // 3) % 5 * 25,
            "context_len": 512 << (i % 4)}


def rows(variant: str, task: str, lo: int, hi: int, seed: int = 0) -> tuple[list[Any], list[Any]]:
    """Samples ``lo``..``hi`` of ``task`` for ``variant`` (and their KLD rows, except for the baseline)."""
    from evalsuite.store.records import KLDResult, SampleResult

    samples, klds = [], []
    for i in range(lo, hi):
        rng = random.Random(f"{seed}:{task}:{i}")
        right = rng.random() < 0.6
        if random.Random(f"{seed}:{variant}:{task}:{i}").random() < FLIP[variant]:
            right = not right
        sid = f"{task}-{i:05d}"
        samples.append(SampleResult(variant, task, "1", sid, f"h{i}", "x" * 8, float(right),
                                    metadata=meta(i), prompt="p"))
        if variant != VARIANTS[0]:
            klds.append(KLDResult(variant, task, sid, tuple(round(rng.random() * FLIP[variant], 4)
                                                           for _ in range(8)), 1, 8))
    return samples, klds


def build(run_dir: Path, n: int) -> Any:
    """A stored run of ``VARIANTS`` on ``TASKS``, ``n`` samples each."""
    from evalsuite.store.sqlite import Store

    store = Store.create(run_dir, {"tasks": list(TASKS), "variants": list(VARIANTS)})
    store.update_state(baseline=VARIANTS[0], variant_order=list(VARIANTS))
    for v in VARIANTS:
        for t in TASKS:
            samples, klds = rows(v, t, 0, n)
            store.put_samples(samples)
            store.put_kld(klds)
    return store


def _timed(decide: Any, store: Any) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one ``decide(store)``."""
    t0, c0 = time.perf_counter(), time.process_time()
    decide(store)
    return time.perf_counter() - t0, time.process_time() - c0


def time_looks(n: int, chunk: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """((wall, CPU) seconds of a first look, (wall, CPU) seconds of the next look after ``chunk`` new pairs of one
    task)."""
    from evalsuite.gate.decide import store_decider

    with tempfile.TemporaryDirectory() as tmp:
        store = build(Path(tmp) / "run", n - chunk)
        decide = store_decider()  # the shipped policy
        first = _timed(decide, store)
        for v in VARIANTS:
            samples, klds = rows(v, TASKS[0], n - chunk, n)
            store.put_samples(samples)
            store.put_kld(klds)
        after = _timed(decide, store)
        store.close()
    return first, after


def cpu_flags() -> str:
    """The CPU's model name and whether it has avx2 / fma / avx512f (Linux /proc/cpuinfo)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "?"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    return f"{name}; " + " ".join(f for f in ("avx2", "fma", "avx512f") if f in flags)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=240, help="pairs per task and variant (default 240)")
    parser.add_argument("--chunk", type=int, default=16, help="new pairs of one task before the second look")
    parser.add_argument("--repeat", type=int, default=5, help="runs; the median is printed")
    args = parser.parse_args()
    times = [time_looks(args.n, args.chunk) for _ in range(args.repeat)]

    def med(k: int, j: int) -> float:
        return statistics.median(t[k][j] for t in times)

    print(f"{len(VARIANTS) - 1} variants x {len(TASKS)} tasks x n={args.n}, median of {args.repeat}: first look "
          f"{med(0, 0):.3f} s ({med(0, 1):.3f} CPU-s); a look after {args.chunk} new pairs of one task "
          f"{med(1, 0):.3f} s ({med(1, 1):.3f} CPU-s); {cpu_flags()}")

if __name__ == "__main__":
    main()
