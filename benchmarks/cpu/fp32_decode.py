"""Where an fp32 decode step's time goes on the CPU, and whether oneDNN-prepacked fp32 Linear weights would pay,
side by side in one process on the embedded model.

Three parts, each alternating its sides so a noisy machine's drift hits both:

* a decode step of the model (batch-invariant kernels, a ``--context``-token cache) at 1, 4, 16 and 32 rows:
  median ms per step, and per row;
* all of the model's Linear layers at ``--rows`` rows: ``F.linear`` against oneDNN-packed weights with a batch
  hint of 1 and of the row count (``torch.ops.mkldnn._reorder_linear_weight``, the op ``models.packed`` uses
  for bf16): min and median ms over ``--rounds``;
* generating ``--n`` answers of ``--task`` through the engine (``iter_generate``, one refilled pool of
  ``--batch`` rows) with every Linear plain and packed (hint ``MIN_ROWS``): wall time, and how many answers are
  identical.

Trade of packing: a packed copy of every Linear weight beside the weight (twice their bytes).
Measured on a 2-core AVX2 EPYC (2026-12-05): README, "Where a decode step's time goes".

    .venv/bin/python -m benchmarks.cpu.fp32_decode --task code --n 16
"""
from __future__ import annotations

import argparse
import statistics
import time
import types
from typing import Any, Callable

import torch
import torch.nn.functional as F

from evalsuite.core.config import RunConfig
from evalsuite.backends.inprocess.generate import iter_generate, shared_prefix_len
from evalsuite.models.invariance import MIN_ROWS
from evalsuite.models.loader import load_model
from evalsuite.cpu.onednn import cpu_flags
from evalsuite.run.prepare import prepare_tasks
from evalsuite.run.prompts import render_prompt
from evalsuite.tasks.registry import default_registry


def ms(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def step_times(model: Any, context: int, batches: list[int], steps: int = 12) -> None:
    """Median ms of a decode step over a ``context``-token cache at each batch size."""
    from transformers import DynamicCache

    g = torch.Generator().manual_seed(0)
    for b in batches:
        ids = torch.randint(100, 1000, (b, context), generator=g)
        with torch.no_grad():
            cache = DynamicCache()
            out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            nxt, times = out.logits[:, -1:].argmax(-1), []
            for _ in range(steps):
                start = time.perf_counter()
                out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                nxt = out.logits[:, -1:].argmax(-1)
                times.append((time.perf_counter() - start) * 1e3)
        med = statistics.median(times[2:])
        print(f"  decode step, {b:2d} rows, {context}-token cache: {med:6.1f} ms ({med / b:6.2f} ms a row)")


def linear_times(linears: list[torch.nn.Linear], rows: list[int], rounds: int) -> None:
    """All Linear layers at each row count: plain against packed with hint 1 and hint = rows."""
    for m in rows:
        xs = {w.in_features: torch.randn(m, w.in_features) for w in linears}
        sides = {"F.linear": {id(w): None for w in linears}}
        for hint in (1, m):
            sides[f"packed (hint {hint})"] = {id(w): torch.ops.mkldnn._reorder_linear_weight(w.weight.detach(), hint)
                                              for w in linears}
        times: dict[str, list[float]] = {k: [] for k in sides}
        for _ in range(rounds):
            for name, packs in sides.items():
                def run() -> None:
                    with torch.no_grad():
                        for w in linears:
                            p = packs[id(w)]
                            x = xs[w.in_features]
                            if p is None:
                                F.linear(x, w.weight, w.bias)
                            else:
                                torch.ops.mkldnn._linear_pointwise(x, p, w.bias, "none", [], "")
                times[name].append(ms(run))
        print(f"  all Linear layers at {m} rows: " + ", ".join(
            f"{k} min {min(v):.1f} / median {statistics.median(v):.1f} ms" for k, v in times.items()))


def set_packed(linears: list[torch.nn.Linear], on: bool) -> None:
    """Every Linear runs from a weight packed with hint ``MIN_ROWS`` (on) or as a plain ``nn.Linear``."""
    for m in linears:
        if on:
            pack = torch.ops.mkldnn._reorder_linear_weight(m.weight.detach(), MIN_ROWS)
            m.forward = types.MethodType(
                lambda self, x, p=pack: torch.ops.mkldnn._linear_pointwise(x, p, self.bias, "none", [], ""), m)
        elif "forward" in m.__dict__:
            del m.forward


def generation(base: Any, linears: list[torch.nn.Linear], task_name: str, n: int, batch: int, rounds: int) -> None:
    """``n`` answers of ``task_name`` generated plain and packed, alternating: wall time and identical answers."""
    params = {"code": {"code": {"source": "both"}}}.get(task_name, {})
    task = prepare_tasks(RunConfig(tasks=[task_name], limit=n, task_params=params), default_registry())[0]
    tok = base.tokenizer
    prompts = [render_prompt(s, tok) for s in task.samples]
    p = shared_prefix_len(tok, prompts)
    times: dict[bool, list[float]] = {False: [], True: []}
    answers: dict[bool, list[Any]] = {}
    for _ in range(rounds):
        for on in (False, True):
            set_packed(linears, on)
            out: dict[int, Any] = {}
            start = time.perf_counter()
            with torch.no_grad():
                for idx, gens in iter_generate(base.model, tok, prompts, task.gen, None, batch, prefix_len=p):
                    out.update({i: g.ids for i, g in zip(idx, gens)})
            times[on].append(time.perf_counter() - start)
            answers[on] = [out[i] for i in range(len(prompts))]
    set_packed(linears, False)
    same = sum(a == b for a, b in zip(answers[False], answers[True]))
    plain, packed = min(times[False]), min(times[True])
    print(f"  {task_name}: {len(prompts)} answers, {sum(map(len, answers[False]))} tokens, batch {batch}: plain "
          f"{plain:.1f} s, packed {packed:.1f} s (min of {rounds}), ratio {plain / packed:.2f}; identical answers "
          f"{same}/{len(prompts)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="code")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--rows", default="12,32,256")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--gen-rounds", type=int, default=2)
    args = ap.parse_args()
    base = load_model("default", "float32", "cpu")
    linears = [m for m in base.model.modules() if type(m) is torch.nn.Linear]
    print(f"CPU flags: {' '.join(sorted(f for f in cpu_flags() if f.startswith(('avx', 'amx', 'fma'))))}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, dtype {base.dtype}")
    step_times(base.model, args.context, [1, 4, 16, 32])
    linear_times(linears, [int(r) for r in args.rows.split(",")], args.rounds)
    generation(base, linears, args.task, args.n, args.batch, args.gen_rounds)


if __name__ == "__main__":
    main()
