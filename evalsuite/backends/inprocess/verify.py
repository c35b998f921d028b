"""Verification: a greedy variant checked against the baseline's answer, decoding only after a divergence.

A greedy decoder's answer is a function of its own next-token choices. One teacher-forced pass of the variant over
prompt + the baseline's answer ids (``run.forced``: the K/V mix decoding gives every token) holds the variant's
choice at every position given the baseline's prefix. Where it equals the baseline's token at every position (and,
for an answer that ended on EOS, picks a stop token after it), the variant's greedy answer *is* the baseline's:
it is stored as ``decode = "verified"``, with no decoding. At the first position ``t`` where it does not, the
variant's cache is rebuilt for the prompt + the baseline's first ``t`` tokens (their K/V from the pass, in a fresh
cache holding the blocks decoding had quantized, as the pass quantized them: ``ties.fill_rows``), the logits that decided
position ``t`` pick its token, and the row decodes step by step from there (``diverged@t``). This is speculative
decoding with the baseline as the draft model.

Exactness: with batch-invariant kernels (``models.invariance``: evalsuite's attention and padded Linear calls on
the CPU, checked by a probe) the pass computes bit for bit what a step-by-step decode computes, so its choices are
the decode's and no margin is needed (the choice is the decoder's own argmax, exact ties included). Elsewhere (quanto's
kernels, CUDA, other attention implementations, bf16 on CPUs with AMX) the two differ in float rounding, and a
position whose top-2 logit margin is below ``NEAR_TIE`` (in the variant's compute dtype) is not decided by the pass:
a decode step decides it (``backends.inprocess.ties``), so rounding between a batched pass and a one-token step cannot
silently flip a choice. If the step picks the baseline's token the row stays verified, else it diverges there.
The same pass gives the KLD (``kld_rows``): one forward, not two.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

from evalsuite.backends.inprocess.decoder import Decoded, Prefix, decode_from, plain_dynamic
from evalsuite.backends.inprocess.drafted import DRAFT, decode_drafted
from evalsuite.backends.inprocess.forced import PromptKV, forced_pass
from evalsuite.backends.inprocess.generate import Generation, cut_at_stop
from evalsuite.backends.inprocess.growcache import dynamic_layers, grow_cache
from evalsuite.backends.inprocess.kld import packed_kld
from evalsuite.backends.inprocess.ties import RowKV, agrees, fill_rows, scan, step_logits
from evalsuite.store.records import Reference
from evalsuite.models.invariance import invariant
from evalsuite.tasks.base import GenSettings
from evalsuite.variants.build import BuiltVariant

#: a top-2 logit margin below this (per compute dtype) is a near-tie: verification does not trust the pass there
NEAR_TIE = {torch.float32: 1e-3, torch.float64: 1e-6, torch.bfloat16: 0.25, torch.float16: 0.05}
#: why ``--verify auto`` regenerates in bf16 on kernels that are not batch-invariant (measured: docs/verification.md)
BF16_UNVERIFIED = ("a weight-only variant in bf16 compute on kernels that are not batch-invariant: regenerating "
                   "costs less than verifying, where most rows diverge early and decode a tail (--verify on verifies)")


def unverifiable(built: BuiltVariant, base_dtype: Any, verify_bf16: bool = True) -> str:
    """"" when ``built``'s greedy answers can be verified against the baseline's, else why they are regenerated
    instead (``base_dtype``: the baseline's compute dtype; ``verify_bf16``: verify a weight-only variant in bf16 on
    kernels that are not batch-invariant too)."""
    if (not verify_bf16 and built.spec.kv is None and not invariant(built.model)
            and str(base_dtype).removeprefix("torch.") == "bfloat16"):
        return BF16_UNVERIFIED
    if not plain_dynamic(built.model):
        return "the model has sliding-window or linear-attention layers (a row's cache cannot be rebuilt)"
    cache = built.make_cache()
    if cache is not None and not hasattr(cache, "track"):
        return ("transformers' QuantizedCache groups batch columns and re-quantizes its residual: no pass "
                "matches its decoding")
    return ""


@dataclass(frozen=True)
class Check:
    """Where a row's choices first leave the baseline's answer (None: never), and the near-ties seen."""

    diverged: int | None
    near_ties: int  # positions checked whose margin was below the threshold (up to and including ``diverged``)
    checked: int  # positions compared
    stepped: int = 0  # near-ties decided by a decode step (``backends.inprocess.ties``; position 0 is the prefill's own)


def near_tie(dtype: torch.dtype, exact: bool = False) -> float:
    """The near-tie margin for logits of ``dtype``; ``exact``: the model's kernels are batch-invariant (the pass's
    logits are the decode's, bit for bit: no margin)."""
    return 0.0 if exact else NEAR_TIE.get(dtype, 1e-3)


def first_divergence(logits: torch.Tensor, ref: Reference, stop_ids: set[int], margin: float | None = None
                     ) -> Check:
    """What the pass alone says: the first position that picks another token than ``ref`` or is a near-tie
    (margin below ``margin``, default ``near_tie`` of the logits' dtype), None if none (``ties.scan``)."""
    clear, ties, checked = scan(logits, ref, stop_ids, near_tie(logits.dtype) if margin is None else margin)
    return Check(ties[0], 1, ties[0] + 1) if ties else Check(clear, 0, checked)


def decide(found: tuple[int | None, list[int], int], logits: torch.Tensor, steps: dict[tuple[int, int], torch.Tensor],
           row: int, ref: Reference, stop_ids: set[int]) -> Check:
    """A row's check from its ``ties.scan`` and the decode steps taken at its near-ties (``steps[(row, t)]``;
    position 0: the prefill's logits): the first near-tie whose decoder's choice is not the baseline's token, or
    else the pass's first clear mismatch (None: verified)."""
    clear, ties, checked = found
    for i, t in enumerate(ties):
        if not agrees(steps[(row, t)] if t else logits[0], ref, t, stop_ids):
            return Check(t, i + 1, t + 1, sum(x > 0 for x in ties[: i + 1]))
    return Check(clear, len(ties), checked, sum(t > 0 for t in ties))


def kld_rows(logits: torch.Tensor, base_lp: torch.Tensor) -> tuple[list[float], int, int]:
    """(KL(base || variant) per answer token, top-1 agreements, tokens) from the pass's logits: the positions
    predicting each answer token (the stop position alone for an empty answer), as ``backends.inprocess.kld`` measures
    them (``packed_kld`` over this one row)."""
    return packed_kld([base_lp], [logits[: base_lp.shape[0]]])[0]


@dataclass
class Verified:
    """One row's outcome: its answer ids and stop reason, how they were obtained, its KLD and its check."""

    ids: list[int]
    stop: str
    decode: str  # "verified" | "diverged@t"
    kld: tuple[list[float], int, int]
    check: Check


def as_generation(v: Verified, tokenizer: Any, base_output: str, stop: Sequence[str]) -> Generation:
    """``v``'s answer as decoding gives it: the baseline's text where verified, else its ids decoded and cut at the
    task's ``stop`` strings."""
    text = base_output if v.decode == "verified" else cut_at_stop(
        tokenizer.decode(v.ids, skip_special_tokens=True), stop).rstrip()
    return Generation(text=text, n_tokens=len(v.ids), prompt_tokens=0, ttft_s=None, itl_s=None, ids=tuple(v.ids),
                      stop=v.stop, decode=v.decode)


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


@dataclass
class Checked:
    """One batch after its pass: each row's check and KLD, and where each diverged row's tail starts (the K/V of its
    prompt + the baseline's first ``t`` tokens, from the pass, and the logits that decided position ``t``)."""

    refs: list[Reference]
    checks: list[Check]
    klds: list[tuple[list[float], int, int]]
    tails: dict[int, tuple[RowKV, torch.Tensor]]


@torch.no_grad()
def check_batch(var: Side, tokenizer: Any, rows: Sequence[Sequence[int]], refs: Sequence[Reference],
                base_lp: Sequence[torch.Tensor], stop_ids: set[int]) -> Checked:
    """The pass of one batch of a greedy variant over the baseline's answers ``refs`` (prompts ``rows`` without
    ``var.prefix``): choices and KLD in one forward, near-ties decided by decode steps (``backends.inprocess.ties``)."""
    f = forced_pass(var.model, rows, var.prefix, var.make_cache(True), tokenizer.pad_token_id,
                    [r.ids[: r.fed] for r in refs], var.snapshot)
    margin = near_tie(f.last.dtype, invariant(var.model))
    logits = [f.logits(r) for r in range(len(refs))]
    scans = [scan(lg, ref, stop_ids, margin) for lg, ref in zip(logits, refs)]
    pairs = [(r, t) for r, (_, ties, _) in enumerate(scans) for t in ties if t > 0]
    steps = step_logits(f, pairs, refs, lambda: var.make_cache(False)) if pairs else {}
    checks = [decide(scans[r], logits[r], steps, r, ref, stop_ids) for r, ref in enumerate(refs)]
    tails = {r: (f.row_kv(r, f.prompt_len[r] + c.diverged), steps.get((r, c.diverged), logits[r][c.diverged]))
             for r, c in enumerate(checks) if c.diverged is not None}
    return Checked(list(refs), checks, [kld_rows(lg, lp) for lg, lp in zip(logits, base_lp)], tails)


@torch.no_grad()
def finish(batches: Sequence[Checked], model: Any, tokenizer: Any, make_cache: Any, gen: GenSettings,
           stop_ids: set[int], draft: int = DRAFT) -> list[list[Verified]]:
    """Every batch's rows as ``Verified``: the diverged rows of all ``batches`` decode their tails together, in
    one batch (rows leave it as they finish), so several batches' tails cost one decode as long as the longest of
    them. A tail keeps the baseline's first ``t`` tokens, its cache is rebuilt from their K/V (``ties.fill_rows``)
    and the logits that decided position ``t`` pick its first token. Tails decode drafted
    (``backends.inprocess.drafted``: up to ``draft`` tokens per forward from the baseline's answer, the same answers);
    ``draft=0``: step by step (``decoder.decode_from``)."""
    items = [(b, r) for b, c in enumerate(batches) for r in sorted(c.tails)]
    done: dict[tuple[int, int], Decoded] = {}
    if items:
        cache, mask = fill_rows([batches[b].tails[r][0] for b, r in items], make_cache(), model.config)
        if dynamic_layers(cache):
            cache = grow_cache(cache)  # an unquantized cache: decode steps append in place
        logits = torch.stack([batches[b].tails[r][1] for b, r in items])
        rows = [Decoded(ids=list(batches[b].refs[r].ids[: batches[b].checks[r].diverged])) for b, r in items]
        if draft > 0 and gen.temperature <= 0:
            corpora = [batches[b].refs[r].ids for b, r in items]
            got = decode_drafted(model, tokenizer, cache, logits, mask, gen, stop_ids, rows, corpora,
                                 near_tie(logits.dtype, invariant(model)), draft)
        else:
            got = decode_from(model, tokenizer, cache, logits, mask, gen, stop_ids, None, rows, [])
        done = dict(zip(items, got))
    out = []
    for b, c in enumerate(batches):
        got = []
        for r, ref in enumerate(c.refs):
            d = done.get((b, r))
            got.append(Verified(d.ids, d.stop, f"diverged@{c.checks[r].diverged}", c.klds[r], c.checks[r])
                       if d is not None
                       else Verified(list(ref.ids), ref.stop, "verified", c.klds[r], c.checks[r]))
        out.append(got)
    return out


def pooled(checked: Iterable[tuple[Any, Checked]], finish_all: Callable[[list[Checked]], list[list[Verified]]],
           max_rows: int, max_tokens: int) -> Iterator[list[tuple[Any, list[Verified]]]]:
    """(key, rows) of consecutive checked batches once their tails are decoded: tails wait for the next batches'
    until they fill ``max_rows`` rows or ``max_tokens`` padded tokens, then decode together (``finish_all``). A
    batch's rows are never given before its tails are decoded, so a run cut short stores whole batches only."""
    pending: list[tuple[Any, Checked]] = []
    for key, c in checked:
        pending.append((key, c))
        lens = [kv[0].keys.shape[1] for _, p in pending for kv, _ in p.tails.values()]
        if not lens or len(lens) >= max_rows or len(lens) * max(lens) >= max_tokens:
            yield list(zip([k for k, _ in pending], finish_all([p for _, p in pending])))
            pending = []
    if pending:
        yield list(zip([k for k, _ in pending], finish_all([p for _, p in pending])))


def verify_batch(var: Side, tokenizer: Any, rows: Sequence[Sequence[int]], refs: Sequence[Reference],
                 base_lp: Sequence[torch.Tensor], gen: GenSettings, stop_ids: set[int], draft: int = DRAFT
                 ) -> list[Verified]:
    """Verify one batch: its pass (``check_batch``), then the tails of the rows that diverged (``finish``)."""
    checked = check_batch(var, tokenizer, rows, refs, base_lp, stop_ids)
    return finish([checked], var.model, tokenizer, lambda: var.make_cache(False), gen, stop_ids, draft)[0]
