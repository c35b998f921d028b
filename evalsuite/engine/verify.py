"""Verification: a greedy variant checked against the baseline's answer, decoding only after a divergence.

A greedy decoder's answer is a function of its own next-token choices. One teacher-forced pass of the variant over
prompt + the baseline's answer ids (``run.forced``: the K/V mix decoding gives every token) holds the variant's
choice at every position given the baseline's prefix. Where it equals the baseline's token at every position (and,
for an answer that ended on EOS, picks a stop token after it), the variant's greedy answer *is* the baseline's:
it is stored as ``decode = "verified"``, with no decoding. At the first position ``t`` where it does not, the
variant's cache is rebuilt for the prompt + the baseline's first ``t - 1`` tokens (their full-precision K/V from
the pass, written into a fresh cache, which quantizes exactly the blocks decoding had quantized), token ``t - 1``
is fed as a decode step and the row decodes step by step from position ``t`` on (``diverged@t``). This is
speculative decoding with the baseline as the draft model.

Exactness: with batch-invariant kernels (``models.invariance``: evalsuite's attention and padded Linear calls on
the CPU, checked by a probe) the pass computes bit for bit what a step-by-step decode computes, so its choices are
the decode's and no margin is needed (the choice is the decoder's own argmax, exact ties included). Elsewhere (quanto's
kernels, CUDA, other attention implementations) the two differ in float rounding, and a position whose top-2 logit
margin is below ``NEAR_TIE`` (in the variant's compute dtype) counts as a mismatch, so rounding cannot silently
flip a choice: such a row decodes from there, step by step, as regeneration would.
The same pass gives the KLD (``kld_rows``): one forward, not two.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from evalsuite.engine.decoder import Decoded, Prefix, decode_from, fill_cache
from evalsuite.engine.forced import Forced, PromptKV, forced_pass
from evalsuite.engine.growcache import dynamic_layers, grow_cache
from evalsuite.core.records import Reference
from evalsuite.models.invariance import invariant
from evalsuite.tasks.base import GenSettings

#: a top-2 logit margin below this (per compute dtype) is a near-tie: verification does not trust the pass there
NEAR_TIE = {torch.float32: 1e-3, torch.float64: 1e-6, torch.bfloat16: 0.25, torch.float16: 0.05}


@dataclass(frozen=True)
class Check:
    """Where a row's choices first leave the baseline's answer (None: never), and the near-ties seen."""

    diverged: int | None
    near_ties: int  # positions checked whose margin was below the threshold (up to and including ``diverged``)
    checked: int  # positions compared


def near_tie(dtype: torch.dtype, exact: bool = False) -> float:
    """The near-tie margin for logits of ``dtype``; ``exact``: the model's kernels are batch-invariant (the pass's
    logits are the decode's, bit for bit: no margin)."""
    return 0.0 if exact else NEAR_TIE.get(dtype, 1e-3)


def first_divergence(logits: torch.Tensor, ref: Reference, stop_ids: set[int], margin: float | None = None
                     ) -> Check:
    """Compare the pass's choices with ``ref``: position k < len(ids) must pick ids[k] by more than ``margin``
    (default ``near_tie`` of the logits' dtype) over the runner-up; after an EOS-ended answer, position len(ids)
    must pick a stop token."""
    n = len(ref.ids)
    checks = n + 1 if ref.stop == "eos" else n
    top = logits[:checks].topk(2, dim=-1).values
    gap = (top[:, 0] - top[:, 1]).float()
    tie = gap < (near_tie(logits.dtype) if margin is None else margin)
    choice = logits[:checks].argmax(-1).tolist()  # as decoding picks (argmax breaks an exact tie the same way)
    for k in range(checks):
        ok = choice[k] in stop_ids if k == n else choice[k] == ref.ids[k]
        if not ok or bool(tie[k]):
            return Check(k, int(tie[: k + 1].sum()), k + 1)
    return Check(None, int(tie.sum()), checks)


def kld_rows(logits: torch.Tensor, base_lp: torch.Tensor) -> tuple[list[float], int, int]:
    """(KL(base || variant) per answer token, top-1 agreements, tokens) from the pass's logits: the positions
    predicting each answer token (the stop position alone for an empty answer), as ``run.kld`` measures them."""
    n = base_lp.shape[0]
    var_lp = torch.log_softmax(logits[:n].float(), dim=-1).to(torch.bfloat16).float()
    base = base_lp.float()
    kl = (base.exp() * (base - var_lp)).sum(-1).clamp(min=0.0)
    agree = int((base.argmax(-1) == var_lp.argmax(-1)).sum())
    return kl.tolist(), agree, n


@torch.no_grad()
def decode_tails(forced: Forced, tokenizer: Any, refs: Sequence[Reference], starts: dict[int, int],
                 first: dict[int, torch.Tensor], make_cache: Any, gen: GenSettings, stop_ids: set[int]
                 ) -> dict[int, Decoded]:
    """Decode every row ``r`` of ``starts`` from its divergence ``t = starts[r]``, all rows in one batch: the
    baseline's first ``t`` tokens kept, the cache rebuilt for the prompt + those ``t`` tokens (their K/V from the
    pass, which computed them as decoding does), and the pass's own logits at position ``t`` (``first[r]``;
    ``t = 0``: the prompt's logits, as decoding starts) picking the first token of the tail."""
    group = sorted(starts)
    model = forced.model
    lens = [forced.prompt_len[r] + starts[r] for r in group]
    kv = [forced.row_kv(r, n) for r, n in zip(group, lens)]
    width, dev = max(lens), forced.mask.device
    mask = torch.zeros(len(group), width, dtype=forced.mask.dtype, device=dev)
    layers = []
    for i in range(len(kv[0])):
        k0 = kv[0][i][0]
        k = k0.new_zeros(len(group), k0.shape[0], width, k0.shape[2])
        v = torch.zeros_like(k)
        for b, rows in enumerate(kv):
            n = rows[i][0].shape[1]
            k[b, :, width - n:], v[b, :, width - n:] = rows[i]
            mask[b, width - n:] = 1
        layers.append((k, v))
    cache = fill_cache(layers, make_cache(), model.config, mask=mask)
    if dynamic_layers(cache):
        cache = grow_cache(cache)  # an unquantized cache: decode steps append in place
    logits = torch.stack([first[r] for r in group]).to(forced.last.dtype)
    rows = [Decoded(ids=list(refs[r].ids[: starts[r]])) for r in group]
    done = decode_from(model, tokenizer, cache, logits, mask, gen, stop_ids, None, rows, [])
    return dict(zip(group, done))


@dataclass
class Verified:
    """One row's outcome: its answer ids and stop reason, how they were obtained, its KLD and its check."""

    ids: list[int]
    stop: str
    decode: str  # "verified" | "diverged@t"
    kld: tuple[list[float], int, int]
    check: Check


@dataclass(frozen=True)
class Side:
    """One model's side of a batch's pass: the model, its cache factory, shared prefix and prompt snapshot."""

    model: Any
    make_cache: Any  # (keep_exact: bool) -> cache or None
    prefix: Prefix | None
    snapshot: PromptKV | None = None


def baseline_logprobs(base: Side, rows: Sequence[Sequence[int]], refs: Sequence[Reference], pad_id: int
                      ) -> list[torch.Tensor]:
    """The baseline's log-probs (bf16) at the positions predicting each answer token, per row: its own
    teacher-forced pass over its answer (the stop position alone for an empty answer)."""
    fed = [r.ids[: max(len(r.ids) - 1, 0)] for r in refs]
    f = forced_pass(base.model, rows, base.prefix, base.make_cache(False), pad_id, fed, base.snapshot)
    return [torch.log_softmax(f.logits(r)[: max(len(ref.ids), 1)].float(), -1).to(torch.bfloat16)
            for r, ref in enumerate(refs)]


@torch.no_grad()
def verify_batch(var: Side, tokenizer: Any, rows: Sequence[Sequence[int]], refs: Sequence[Reference],
                 base_lp: Sequence[torch.Tensor], gen: GenSettings, stop_ids: set[int]) -> list[Verified]:
    """Verify one batch of a greedy variant against the baseline's answers ``refs`` (prompts ``rows`` without
    ``var.prefix``): one pass for choices and KLD, then step-by-step tails for the rows that diverged."""
    f = forced_pass(var.model, rows, var.prefix, var.make_cache(True), tokenizer.pad_token_id,
                    [r.ids[: r.fed] for r in refs], var.snapshot)
    checks, klds, first = [], [], {}
    margin = near_tie(f.last.dtype, invariant(var.model))
    for r, ref in enumerate(refs):
        logits = f.logits(r)
        checks.append(first_divergence(logits, ref, stop_ids, margin))
        klds.append(kld_rows(logits, base_lp[r]))
        if checks[-1].diverged is not None:
            first[r] = logits[checks[-1].diverged]
    starts = {r: c.diverged for r, c in enumerate(checks) if c.diverged is not None}
    tails = (decode_tails(f, tokenizer, refs, starts, first, lambda: var.make_cache(False), gen, stop_ids)
             if starts else {})
    out = []
    for r, ref in enumerate(refs):
        if r in tails:
            out.append(Verified(tails[r].ids, tails[r].stop, f"diverged@{starts[r]}", klds[r], checks[r]))
        else:
            out.append(Verified(list(ref.ids), ref.stop, "verified", klds[r], checks[r]))
    return out
