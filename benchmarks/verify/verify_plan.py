"""How verification passes are batched, side by side in one process: the old cut (rows sorted by prompt + answer
length, cut at the row and token budget: ``backends.inprocess.decoder.plan_batches``) against
``backends.inprocess.forced.plan_passes`` (the cut that pads the fewest token slots), on the same baseline answers and
the same variant. Both sides run the baseline's log-probs and the variant's pass + tails batch by batch
(``backends.inprocess.verify``), alternated ``--repeat`` times; the outputs must be equal (the kernels are
batch-invariant), and the table gives each cut's seconds.

    .venv/bin/python -m benchmarks.verify.verify_plan --task needle --n 16 --variant kv4g32
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable, Sequence

import torch

from evalsuite.store.records import Reference
from evalsuite.backends.inprocess.decoder import encode_prefix, plan_batches
from evalsuite.backends.inprocess.forced import plan_passes
from evalsuite.backends.inprocess.generate import encode_prompts, iter_generate, stop_ids
from evalsuite.backends.inprocess.verify import Side, baseline_logprobs, verify_batch
from evalsuite.cpu.onednn import cpu_flags
from evalsuite.variants.build import build_variant
from evalsuite.variants.spec import parse_variant

from benchmarks.verify.verify_cost import load_task

SIMD = {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}  #: what decides fp32 / bf16 speed here
MAX_TOKENS = 24576  #: the runner's padded-token budget per batch


def run_plan(plan: list[list[int]], base: Any, variant: Any, tok: Any, rows: list[list[int]], head: list[int],
             refs: list[Reference], gen: Any) -> tuple[float, list[tuple[str, str]]]:
    """Seconds for every batch of ``plan`` (baseline log-probs, the variant's pass, its tails) and each row's
    (decode, answer ids) in row order."""
    out: dict[int, tuple[str, str]] = {}
    start = time.perf_counter()
    for js in plan:
        side = Side(base.model, lambda keep: None, encode_prefix(base.model, head))
        lp = baseline_logprobs(side, [rows[j] for j in js], [refs[j] for j in js], tok.pad_token_id)
        var = Side(variant.model, variant.make_cache, encode_prefix(variant.model, head, variant.make_cache()))
        got = verify_batch(var, tok, [rows[j] for j in js], [refs[j] for j in js], lp, gen, stop_ids(tok))
        out.update({j: (v.decode, str(v.ids)) for j, v in zip(js, got)})
    return time.perf_counter() - start, [out[j] for j in range(len(rows))]


def alternate(plans: dict[str, list[list[int]]], repeat: int, once: Callable[[list[list[int]]], Any]
              ) -> dict[str, list[float]]:
    """Each plan run ``repeat`` times, alternated; their outputs must agree."""
    times: dict[str, list[float]] = {k: [] for k in plans}
    first: Sequence[Any] | None = None
    for _ in range(repeat):
        for name, plan in plans.items():
            seconds, rows = once(plan)
            if first is not None and rows != first:
                raise SystemExit(f"{name}: outputs differ from the other cut's (kernels not batch-invariant?)")
            first = rows
            times[name].append(seconds)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="needle")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--variant", default="kv4g32")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    args = ap.parse_args()
    base, task, prompts, p = load_task(args.task, args.n, args.dtype)
    tok = base.tokenizer
    gens: dict[int, Any] = {}
    for idx, gs in iter_generate(base.model, tok, prompts, task.gen, None, args.batch, prefix_len=p):
        gens.update(zip(idx, gs))
    refs = [Reference(gens[i].ids, gens[i].stop) for i in range(len(prompts))]
    keys = encode_prompts(tok, prompts)
    rows, head = [k[p:] for k in keys], keys[0][:p]
    variant = build_variant(base, parse_variant(args.variant))
    prompt_lens, answer_lens = [len(r) for r in rows], [len(r.ids) for r in refs]
    plans = {"old cut (prompt + answer sorted)": plan_batches([len(k) + a for k, a in zip(keys, answer_lens)],
                                                               args.batch, MAX_TOKENS),
             "plan_passes": plan_passes(prompt_lens, answer_lens, True, args.batch, MAX_TOKENS)}
    times = alternate(plans, args.repeat, lambda plan: run_plan(plan, base, variant, tok, rows, head, refs, task.gen))
    print(f"{args.task}, {len(rows)} samples, prompts {min(prompt_lens)}-{max(prompt_lens)} tokens, answers "
          f"{min(answer_lens)}-{max(answer_lens)}, variant {args.variant}, dtype {base.dtype}, "
          f"{torch.get_num_threads()} threads, CPU flags: {' '.join(sorted(cpu_flags() & SIMD))}")
    print("| cut | batches (rows) | seconds, each run | median |")
    print("|---|---|---|---|")
    for name, plan in plans.items():
        print(f"| {name} | {len(plan)} ({', '.join(str(len(b)) for b in plan)}) | "
              f"{', '.join(f'{t:.1f}' for t in times[name])} | {statistics.median(times[name]):.1f} |")
    old, new = (statistics.median(t) for t in times.values())
    print(f"outputs equal under both cuts; plan_passes takes {old / new:.2f}x less time")


if __name__ == "__main__":
    main()
