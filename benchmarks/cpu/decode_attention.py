"""Attention: transformers' SDPA against evalsuite's batch-invariant kernels (``evalsuite.models.attention``), side
by side in one process on the same inputs.

Four parts: the decode attention call alone at SmolLM2-135M's head shape (9 query heads over 3 K/V heads, head
dim 64), with and without a padding mask (``cached_attention``: the values' own dtype where the probe allows, else
``block_sum``); a teacher-forced chunk's call with the batch whole and in slices of rows (``SLICE_BYTES``); the
prefill call of left-padded rows (masked SDPA against ``row_prefill``) at needle lengths; then
the embedded model generating a task's answers through the engine (``iter_generate``, the refilled pool) under each
kernel at two batch sizes: wall time, and how many answers are identical across the batch sizes (batch invariance).

    .venv/bin/python -m benchmarks.cpu.decode_attention --task needle --n 16
"""
from __future__ import annotations

import argparse
import time
from typing import Callable

import torch
import torch.nn.functional as F

from evalsuite.cli.run_cmd import parse_params
from evalsuite.core.config import RunConfig
from evalsuite.backends.inprocess.generate import iter_generate, shared_prefix_len
from evalsuite.models.attention import NAME, cached_attention, register, row_prefill
from evalsuite.models.invariance import probe
from evalsuite.models.loader import load_model
from evalsuite.run.prepare import prepare_tasks
from evalsuite.run.prompts import render_prompt
from evalsuite.tasks.registry import default_registry


def per_call_ms(fn: Callable[[], object], n: int = 20) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1000


def kernel_table(dtype: torch.dtype, cap: int) -> None:
    """The attention call alone: ms per layer call, and the max error of each against a float32 reference (batch
    and context capped at ``cap``)."""
    heads, kv_heads, dim = 9, 3, 64
    exact = dtype != torch.float32 and probe(dtype, (), dim).values
    for batch, length in ((min(16, cap), min(300, cap)), (min(16, cap), min(2048, cap)), (1, min(2048, cap))):
        q = torch.randn(batch, heads, 1, dim, dtype=dtype)
        k, v = (torch.randn(batch, kv_heads, length, dim, dtype=dtype) for _ in range(2))
        mask = torch.ones(batch, 1, 1, length, dtype=torch.bool)
        mask[: batch // 2, :, :, :7] = False  # left padding on half the rows
        for label, m in (("no mask", None), ("padding mask", mask)):
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=m, enable_gqa=True)
            with torch.inference_mode():
                t_sdpa = per_call_ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True))
                t_ours = per_call_ms(lambda: cached_attention(q, k, v, m, dim ** -0.5, exact))
                e_sdpa = (F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True).float()
                          - ref).abs().max().item()
                e_ours = (cached_attention(q, k, v, m, dim ** -0.5, exact).transpose(1, 2).float()
                          - ref).abs().max().item()
            print(f"  {str(dtype)[6:]:8} batch {batch:2} context {length:4} {label:12}: SDPA {t_sdpa:6.2f} ms "
                  f"(err {e_sdpa:.1e})  evalsuite {t_ours:6.2f} ms (err {e_ours:.1e}, "
                  f"{'values dtype' if exact else 'block_sum'})  {t_sdpa / t_ours:4.1f}x")


def chunk_table(dtype: torch.dtype, cap: int) -> None:
    """A teacher-forced chunk (many queries per row over a cache, causal at the end, rows left-padded): the call
    with the batch in one piece against slices of rows (``SLICE_BYTES``), alternating, best of three; the values
    must be equal bit for bit (batch, queries and keys capped at ``cap``)."""
    import evalsuite.models.attention as attention

    heads, kv_heads, dim = 9, 3, 64
    exact = dtype != torch.float32 and probe(dtype, (), dim).values
    sliced, whole_batch = attention.SLICE_BYTES, 1 << 40
    for batch, n, length in ((32, 64, 300), (32, 100, 400), (16, 128, 1100), (16, 1, 2048)):
        batch, n, length = min(batch, cap), min(n, cap), min(length, cap)
        q = torch.randn(batch, heads, n, dim, dtype=dtype)
        k, v = (torch.randn(batch, kv_heads, length, dim, dtype=dtype) for _ in range(2))
        i, j = torch.arange(length), torch.arange(length - n, length)
        mask = (i[None, :] <= j[:, None]).expand(batch, n, length).clone()
        for row in range(batch):
            mask[row, :, : (7 * row) % (length // 4)] = False  # left padding
        mask = mask[:, None]
        times: dict[int, list[float]] = {whole_batch: [], sliced: []}
        outs = {}
        with torch.inference_mode():
            for _ in range(3):
                for budget in times:
                    attention.SLICE_BYTES = budget
                    times[budget].append(per_call_ms(lambda: cached_attention(q, k, v, mask, dim ** -0.5, exact),
                                                     n=5))
                    outs[budget] = cached_attention(q, k, v, mask, dim ** -0.5, exact)
        attention.SLICE_BYTES = sliced
        whole, cut = min(times[whole_batch]), min(times[sliced])
        print(f"  {str(dtype)[6:]:8} batch {batch:2} x {n:3} queries over {length:4} keys: whole batch {whole:6.1f} ms"
              f"  sliced ({attention.slice_rows(heads, n, kv_heads, length)} rows) {cut:6.1f} ms  {whole / cut:4.2f}x"
              f"  equal: {torch.equal(outs[whole_batch], outs[sliced])}")


def prefill_table(cap: int) -> None:
    """A layer's prefill call over left-padded bf16 rows: SDPA with transformers' boolean mask against
    ``row_prefill`` (each row alone over its own tokens under ``is_causal``), and the max difference on real
    positions (lengths capped at ``cap``)."""
    heads, kv_heads, dim = 9, 3, 64
    for full in ((900, 1000, 1100, 1200), (600, 2000), (300, 350, 400, 450, 500, 550)):
        lengths = tuple(min(m, cap) for m in full)
        b, n = len(lengths), max(lengths)
        q = torch.randn(b, heads, n, dim, dtype=torch.bfloat16)
        k, v = (torch.randn(b, kv_heads, n, dim, dtype=torch.bfloat16) for _ in range(2))
        i = torch.arange(n)
        mask = (i[None, :] <= i[:, None]).expand(b, n, n).clone()
        for row, length in enumerate(lengths):
            mask[row, :, : n - length] = False
        mask = mask[:, None]
        with torch.inference_mode():
            t_sdpa = per_call_ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True),
                                 n=3)
            t_ours = per_call_ms(lambda: row_prefill(q, k, v, mask, dim ** -0.5), n=3)
            want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).transpose(1, 2)
            got = row_prefill(q, k, v, mask, dim ** -0.5)
        diff = max((got[r, n - m:] - want[r, n - m:]).abs().max().item() for r, m in enumerate(lengths))
        print(f"  rows {lengths}: masked SDPA {t_sdpa:6.1f} ms  per-row {t_ours:6.1f} ms  "
              f"{t_sdpa / t_ours:4.1f}x  (max diff {diff:.1e})")


def generate_side_by_side(task_name: str, n: int, batch: int, dtype: str, params: dict) -> None:
    """The embedded model answering ``n`` samples of a task under each kernel, at ``batch`` and at a smaller batch
    (alternating kernels): wall time at ``batch`` and identical answers across the two batch sizes."""
    base = load_model("default", dtype, "cpu")
    task = prepare_tasks(RunConfig(tasks=[task_name], limit=n, task_params=params), default_registry())[0]
    tok = base.tokenizer
    prompts = [render_prompt(s, tok) for s in task.samples]
    p = shared_prefix_len(tok, prompts)
    register()
    small = max(1, batch // 3)
    times: dict[str, list[float]] = {"sdpa": [], NAME: []}
    answers: dict[tuple[str, int], list[tuple[int, ...]]] = {}
    for kernel, size in (("sdpa", batch), (NAME, batch), ("sdpa", small), (NAME, small)):
        base.model.set_attn_implementation(kernel)
        start, out = time.perf_counter(), {}
        for idx, gens in iter_generate(base.model, tok, prompts, task.gen, None, size, prefix_len=p):
            out.update({i: g.ids for i, g in zip(idx, gens)})
        if size == batch:
            times[kernel].append(time.perf_counter() - start)
        answers[kernel, size] = [out[i] for i in range(len(prompts))]
    tokens = sum(len(a) for a in answers["sdpa", batch])
    print(f"  {task_name}: {len(prompts)} samples, {tokens} answer tokens, dtype {base.dtype}, batch {batch}, "
          f"torch threads {torch.get_num_threads()}")
    print(f"  generate at batch {batch}: SDPA {times['sdpa'][0]:.1f} s, evalsuite {times[NAME][0]:.1f} s: "
          f"{times['sdpa'][0] / times[NAME][0]:.2f}x")
    for kernel in ("sdpa", NAME):
        same = sum(a == b for a, b in zip(answers[kernel, batch], answers[kernel, small]))
        print(f"  {kernel}: answers at batch {batch} = at batch {small} on {same}/{len(prompts)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="needle")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--skip-generate", action="store_true")
    ap.add_argument("--cap", type=int, default=1 << 16,
                    help="cap every batch and length of the kernel tables (a quick check of the script: 32)")
    ap.add_argument("--param", action="append", default=[], help="task.key=value, as `evalsuite run --param`")
    args = ap.parse_args()
    print("attention call (ms per layer call):")
    for dtype in (torch.bfloat16, torch.float32):
        kernel_table(dtype, args.cap)
    print("chunk call, whole batch vs slices of rows (ms per layer call):")
    for dtype in (torch.bfloat16, torch.float32):
        chunk_table(dtype, args.cap)
    print("prefill call of left-padded rows (ms per layer call, bf16):")
    prefill_table(args.cap)
    if not args.skip_generate:
        print("the embedded model generating through the engine:")
        generate_side_by_side(args.task, args.n, args.batch, args.dtype, parse_params(args.param))


if __name__ == "__main__":
    main()
