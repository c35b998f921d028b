"""What a variant's per-sample work costs, side by side on the same samples: generating its answers, the KLD pass
of ``--verify off`` (prompt, then the answer as one chunk; log-softmax, KL and top-1 over real answer positions
only: ``backends.inprocess.kld.packed_kld``), the same pass computed over the whole padded batch as it was before
(float32 [batch, answer, vocab] log-probs of both models; its KL values must be the same), and the verification pass
that replaces generation + KLD (``backends.inprocess.verify``: one chunked pass, ``lm_head`` at answer positions only,
KL per row).

    .venv/bin/python -m benchmarks.verify.verify_cost --task code --n 16 --variant w4g32
"""
from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from evalsuite.models.loader import load_model
from evalsuite.core.config import RunConfig
from evalsuite.backends.inprocess.generate import encode_prompts, iter_generate, shared_prefix_len, stop_ids
from evalsuite.backends.inprocess.answer import prefill_answer_logprobs
from evalsuite.backends.inprocess.decoder import encode_prefix
from evalsuite.backends.inprocess.kld import baseline_answer_logprobs, encode_answers, teacher_forced_kld
from evalsuite.run.prepare import prepare_tasks
from evalsuite.run.prompts import render_prompt
from evalsuite.store.records import Reference
from evalsuite.backends.inprocess.verify import Side, baseline_logprobs, verify_batch
from evalsuite.tasks.registry import default_registry
from evalsuite.variants.build import build_variant
from evalsuite.variants.spec import parse_variant


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def load_task(name: str, n: int, dtype: str) -> tuple[Any, Any, list[tuple[str, bool]], int]:
    """The embedded model, ``n`` samples of task ``name``, their rendered prompts and shared prefix length."""
    base = load_model("default", dtype, "cpu")
    task = prepare_tasks(RunConfig(tasks=[name], limit=n), default_registry())[0]
    prompts = [render_prompt(s, base.tokenizer) for s in task.samples]
    return base, task, prompts, shared_prefix_len(base.tokenizer, prompts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="code")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--variant", default="w4g32")
    ap.add_argument("--dtype", default="auto")
    args = ap.parse_args()
    base, task, prompts, p = load_task(args.task, args.n, args.dtype)
    tok = base.tokenizer
    ids_by = {}

    def generate_base() -> None:
        for idx, gs in iter_generate(base.model, tok, prompts, task.gen, None, args.n, prefix_len=p):
            ids_by.update(zip(idx, gs))

    _, t_base = timed(generate_base)
    variant = build_variant(base, parse_variant(args.variant))
    _, t_var = timed(lambda: list(iter_generate(variant.model, tok, prompts, task.gen, variant.make_cache,
                                                args.n, prefix_len=p)))
    answers = [ids_by[i].text for i in range(len(prompts))]
    keys = encode_prompts(tok, prompts)
    rows, head = [k[p:] for k in keys], keys[0][:p]

    def padded() -> list[list[float]]:
        ans = encode_answers(tok, answers)
        base_lp, _ = baseline_answer_logprobs(base.model, tok, prompts, answers, prefix_len=p)
        cache = variant.make_cache()
        var_lp = prefill_answer_logprobs(variant.model, rows, encode_prefix(variant.model, head, cache), cache,
                                         tok.pad_token_id, ans["input_ids"], ans["attention_mask"])
        var_lp = var_lp.to(torch.bfloat16).float()
        kl = (base_lp.exp() * (base_lp - var_lp)).sum(-1).clamp(min=0.0)
        return [kl[r, : int(n)].tolist() for r, n in enumerate(ans["attention_mask"].sum(-1))]

    got_pad, t_pad = timed(padded)
    got_kld, t_old = timed(lambda: teacher_forced_kld(base.model, variant.model, tok, prompts, answers,
                                                      variant.make_cache, None, None, prefix_len=p))
    same = [k for k, _, _ in got_kld] == got_pad
    refs = [Reference(ids_by[i].ids, ids_by[i].stop) for i in range(len(prompts))]

    def new_pass():
        side = Side(base.model, lambda keep: None, encode_prefix(base.model, head))
        lp = baseline_logprobs(side, rows, refs, tok.pad_token_id)
        var = Side(variant.model, variant.make_cache, encode_prefix(variant.model, head, variant.make_cache()))
        return verify_batch(var, tok, rows, refs, lp, task.gen, stop_ids(tok))

    got, t_new = timed(new_pass)
    verified = sum(v.decode == "verified" for v in got)
    tokens = sum(len(r.ids) for r in refs)
    print(f"{args.task}, {len(prompts)} samples, {tokens} answer tokens, dtype {base.dtype}, variant {args.variant}, "
          f"torch threads {torch.get_num_threads()}")
    print("| work | seconds | per sample |")
    print("|---|---|---|")
    for name, t in [("baseline generation", t_base), (f"{args.variant} generation", t_var),
                    ("KLD pass over the padded batch, as before (baseline + variant)", t_pad),
                    (f"KLD pass over answer positions (baseline + variant; KL {'identical' if same else 'DIFFERS'})",
                     t_old),
                    (f"verification pass + KLD + tails ({verified}/{len(got)} verified)", t_new)]:
        print(f"| {name} | {t:.2f} | {t / len(prompts):.3f} |")
    print(f"verification replaces generation + KLD: {(t_var + t_old) / t_new:.2f}x less time")


if __name__ == "__main__":
    main()
