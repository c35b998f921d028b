"""Seconds of teacher-forced KLD for a KV-cache-only variant, with and without the baseline's prompt snapshot.

Both timings run after the baseline's log-probs are cached (what every variant after the first sees), side by side
in one process: "prefill" is today's path (the variant prefills the prompt again), "snapshot" fills the variant's
cache from the baseline's prompt K/V. The KLDs are printed too: they must agree.

    python -m benchmarks.verify.kld_snapshot --task json --n 8 --kv kv4g32 [--dtype auto]
"""
from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="json")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--kv", default="kv4g32")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    from evalsuite.models import load_model, offline
    from evalsuite.models.dtype import choose_compute_dtype
    from evalsuite.core.config import RunConfig
    from evalsuite.backends.inprocess.generate import shared_prefix_len
    from evalsuite.backends.inprocess.kld import BaselineLogprobCache, teacher_forced_kld
    from evalsuite.run.prepare import prepare_tasks
    from evalsuite.run.prompts import render_prompt
    from evalsuite.tasks.registry import default_registry
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import parse_variant

    offline()
    dtype = choose_compute_dtype().dtype if args.dtype == "auto" else args.dtype
    base = load_model("default", dtype)
    (task,) = prepare_tasks(RunConfig(tasks=[args.task], limit=args.n), default_registry())
    variant = build_variant(base, parse_variant(args.kv))
    prompts = [render_prompt(s, base.tokenizer) for s in task.samples]
    answers = ['{"name": "Ada Lovelace", "year": 1843, "tags": ["math", "engine", "notes"], "ok": true}'] * len(prompts)
    p = shared_prefix_len(base.tokenizer, prompts)
    for label in ["prefill", "snapshot"] * args.repeats:
        store = BaselineLogprobCache(prompt_bytes=0 if label == "prefill" else 2 << 30)
        teacher_forced_kld(base.model, base.model, base.tokenizer, prompts, answers, None, store, "k", p)
        t0 = time.perf_counter()
        res = teacher_forced_kld(base.model, variant.model, base.tokenizer, prompts, answers, variant.make_cache,
                                 store, "k", p)
        secs = time.perf_counter() - t0
        mean = sum(sum(k) for k, _, _ in res) / sum(n for _, _, n in res)
        print(f"{args.kv} {label:<9} {secs:6.2f} s  mean KLD {mean:.6f}  ({len(prompts)} prompts, {dtype})",
              flush=True)


if __name__ == "__main__":
    main()
