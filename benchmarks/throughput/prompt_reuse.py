"""Seconds per variant of a needle run with and without prompt K/V reuse
(``evalsuite/backends/inprocess/snapshots.py``).

Two in-process runs side by side in one process, on the same samples: ``reuse`` (a weight-only variant's KLD
reuses the prompt K/V of its own generation, the default; a KV-cache-only variant starts from the baseline's
prompt K/V, ``--reuse-prompt-kv``) and ``recompute`` (every pass prefills its prompts). Prints generation and KLD
seconds per variant and the mean KLD of each (equal for the weight variant up to the last float bits; the KV
variant's answers, and so its KLD, may differ: see ``evalsuite/backends/inprocess/snapshots.py``).

    python -m benchmarks.throughput.prompt_reuse --n 4 --context 1024 --variants w4g64,kv4g32
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def timed_run(base, tasks, variants: list[str], snapshot_bytes: int, folder: Path) -> tuple[dict, dict]:
    """(seconds per (phase, variant), mean KLD per variant) of one run."""
    from evalsuite.core.config import RunConfig
    from evalsuite.backends.inprocess.inprocess import InProcessBackend
    from evalsuite.run.runner import Runner
    from evalsuite.store.sqlite import Store

    config = RunConfig(model=base.name, variants=variants, tasks=[t.name for t in tasks])
    store = Store.create(folder, config.to_dict())
    backend = InProcessBackend.of(base, snapshot_bytes=snapshot_bytes, reuse_base_prompts=snapshot_bytes > 0)
    runner = Runner(config, backend, tasks, store, progress=False, log=lambda s: None)
    specs = backend.variants(variants)
    seconds: dict = {}
    for spec in specs:
        start = time.perf_counter()
        runner.generate(spec, spec.name, config.batch_size)
        seconds[("gen", spec.name)] = time.perf_counter() - start
        if spec is not specs[0]:
            start = time.perf_counter()
            runner.kld(spec, spec.name, specs[0].name, config.batch_size // 2)
            seconds[("kld", spec.name)] = time.perf_counter() - start
    kld = {v.name: sum(k.mean for k in store.kld(v.name)) / max(1, len(store.kld(v.name))) for v in specs[1:]}
    return seconds, kld


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--variants", default="w4g64,kv4g32")
    ap.add_argument("--dtype", default="auto")
    args = ap.parse_args()

    from evalsuite.models import load_model, offline
    from evalsuite.core.config import RunConfig
    from evalsuite.run.prepare import prepare_tasks
    from evalsuite.tasks.registry import default_registry

    offline()
    base = load_model("default", args.dtype)
    config = RunConfig(tasks=["needle"], limit=args.n,
                       task_params={"needle": {"context_lens": [args.context], "depths": [0.5]}})
    from evalsuite.backends.inprocess.inprocess import InProcessBackend

    tasks = prepare_tasks(config, default_registry(), InProcessBackend.of(base).task_context())
    variants = ["bf16", *args.variants.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        reuse, k_reuse = timed_run(base, tasks, variants, 2 << 30, Path(tmp) / "reuse")
        again, k_again = timed_run(base, tasks, variants, 0, Path(tmp) / "recompute")
    print(f"\nneedle, {args.n} samples at {args.context} tokens, {base.dtype}")
    print(f"{'phase':<6}{'variant':<22}{'reuse s':>9}{'recompute s':>13}{'×':>7}")
    for key in again:
        print(f"{key[0]:<6}{key[1]:<22}{reuse[key]:>9.1f}{again[key]:>13.1f}{again[key] / reuse[key]:>7.2f}")
    total_r, total_a = sum(reuse.values()), sum(again.values())
    print(f"{'all':<28}{total_r:>9.1f}{total_a:>13.1f}{total_a / total_r:>7.2f}")
    print("mean KLD (reuse / recompute):", {v: (round(k_reuse[v], 5), round(k_again[v], 5)) for v in k_reuse})


if __name__ == "__main__":
    main()
