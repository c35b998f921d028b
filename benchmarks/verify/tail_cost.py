"""Diverged tails decoded step by step against drafted (``backends.inprocess.drafted``), side by side on the same
checked batches: wall time, forwards and how many tails come out identical.

The baseline answers the task's first ``--n`` samples (greedy); the variant's verification pass checks them in
batches of ``--batch``; then the same diverged rows' tails are decoded by ``verify.finish`` twice, ``draft=0``
(``decoder.decode_from``, one token per row per forward) and ``draft=DRAFT``, in alternating order ``--repeat``
times.

    .venv/bin/python -m benchmarks.verify.tail_cost --task code --n 48 --variant kv8g32
"""
from __future__ import annotations

import argparse
import time

from evalsuite.cli.run_cmd import parse_params
from evalsuite.core.config import RunConfig
from evalsuite.store.records import Reference
from evalsuite.backends.inprocess import drafted
from evalsuite.backends.inprocess.decoder import encode_prefix
from evalsuite.backends.inprocess.generate import encode_prompts, iter_generate, shared_prefix_len, stop_ids
from evalsuite.backends.inprocess.verify import Side, baseline_logprobs, check_batch, finish
from evalsuite.models.loader import load_model
from evalsuite.run.prepare import prepare_tasks
from evalsuite.run.prompts import render_prompt
from evalsuite.tasks.registry import default_registry
from evalsuite.variants.build import build_variant
from evalsuite.variants.spec import parse_variant


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="code")
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--variant", default="kv8g32")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--param", action="append", default=[], help="task.key=value, as `evalsuite run --param`")
    ap.add_argument("--tokens", default=str(drafted.TOKENS), help="comma-separated drafted.TOKENS values to time")
    args = ap.parse_args()
    base = load_model("default", args.dtype, "cpu")
    task = prepare_tasks(RunConfig(tasks=[args.task], limit=args.n, task_params=parse_params(args.param)),
                         default_registry())[0]
    tok = base.tokenizer
    prompts = [render_prompt(s, tok) for s in task.samples]
    p = shared_prefix_len(tok, prompts)
    refs: dict[int, Reference] = {}
    for idx, gs in iter_generate(base.model, tok, prompts, task.gen, None, args.batch, prefix_len=p):
        refs.update((i, Reference(tuple(g.ids), g.stop)) for i, g in zip(idx, gs))
    variant = build_variant(base, parse_variant(args.variant))
    keys = encode_prompts(tok, prompts)
    head = list(keys[0][:p])
    checked = []
    for s in range(0, len(prompts), args.batch):
        js = list(range(s, min(s + args.batch, len(prompts))))
        rows, rr = [list(keys[j][p:]) for j in js], [refs[j] for j in js]
        lp = baseline_logprobs(Side(base.model, lambda keep: None, encode_prefix(base.model, head)), rows, rr,
                               tok.pad_token_id)
        var = Side(variant.model, variant.make_cache, encode_prefix(variant.model, head, variant.make_cache()))
        checked.append(check_batch(var, tok, rows, rr, lp, stop_ids(tok)))
    tails = sum(len(c.tails) for c in checked)
    print(f"{args.variant} {args.task}: {len(prompts)} samples, {tails} diverged tails, dtype {base.dtype}")
    runs = [(0, drafted.TOKENS)] + [(drafted.DRAFT, int(t)) for t in args.tokens.split(",")]
    calls: list[int] = []
    orig = drafted._feed
    drafted._feed = lambda *a: (calls.append(1), orig(*a))[1]
    times: dict[tuple[int, int], list[float]] = {r: [] for r in runs}
    outs, forwards = {}, {}
    for r in range(args.repeat):
        for run in (runs if r % 2 == 0 else runs[::-1]):
            calls.clear()
            drafted.TOKENS = run[1]
            t0 = time.perf_counter()
            outs[run] = finish(checked, variant.model, tok, lambda: variant.make_cache(False), task.gen,
                               stop_ids(tok), draft=run[0])
            times[run].append(time.perf_counter() - t0)
            forwards[run] = len(calls)
    ref = [v for b in outs[runs[0]] for v in b if v.decode != "verified"]
    steps = sum(len(v.ids) - int(v.decode.split("@")[1]) + 1 for v in ref)
    print(f"step by step: {min(times[runs[0]]):.2f} s (runs {', '.join(f'{t:.2f}' for t in times[runs[0]])}); "
          f"tail tokens {steps}")
    for run in runs[1:]:
        got = [v for b in outs[run] for v in b if v.decode != "verified"]
        same = sum(x.ids == y.ids and x.stop == y.stop for x, y in zip(ref, got))
        print(f"drafted (draft {run[0]}, {run[1]} tokens/forward): {min(times[run]):.2f} s "
              f"(runs {', '.join(f'{t:.2f}' for t in times[run])}); forwards {forwards[run]}; identical tails "
              f"{same} / {len(ref)}; speed-up {min(times[runs[0]]) / min(times[run]):.2f}x")

if __name__ == "__main__":
    main()
