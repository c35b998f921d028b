"""Teacher-forced KL divergence of a variant's next-token distribution from the baseline's (llama.cpp-style).

The baseline's own answer tokens are fed *after* the prompt as a second chunk (``backends.inprocess.answer``), so a KV
variant really reads its quantized cache (a single forward pass over prompt+answer shows no KV effect in ``exact``
prefill mode). The first answer token is predicted from the prompt chunk's last position; the rest from the answer
chunk.

No second prompt prefill for a variant that shares the baseline's weights (a KV-cache-only variant, or the
baseline's noise floor) and whose cache takes an exact prefill: its prompt K/V and last-position logits are exactly
the baseline's, so the baseline pass keeps a snapshot of them (references to the prompt chunk's K/V tensors,
no copy: the answer chunk's ``update`` concatenates into new tensors) and the variant's cache is filled from it,
as the decoder's exact transfer does, before its own answer chunk. Snapshots live in the prompt K/V store
(``backends.inprocess.snapshots``) under its byte budget (memory spent for speed); past it the prompt is prefilled
again.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

from evalsuite.backends.inprocess.answer import PromptKV, prefill_answer_logprobs, snapshot_answer_logprobs
from evalsuite.backends.inprocess.decoder import encode_prefix, exact_prefill, observe_prefills
from evalsuite.backends.inprocess.generate import encode_prompts


class BaselineLogprobCache:
    """Keeps the baseline's answer log-probs (bf16) between variants, up to a byte budget, so the baseline's
    teacher-forced pass runs once per batch instead of once per variant. (Prompt K/V live in one store,
    ``backends.inprocess.snapshots.PromptStore``, filled by the baseline's generation.)"""

    def __init__(self, max_bytes: int = 4 << 30) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._store: dict[Any, Any] = {}

    def get_rows(self, key: Any, compute: Callable[[], list[torch.Tensor]]) -> list[torch.Tensor]:
        """Per-row bf16 log-probs of one batch (the baseline's side of a ``--verify off`` KLD pass), kept under the
        same byte budget."""
        if key in self._store:
            return self._store[key]
        rows = [r.to(torch.bfloat16) for r in compute()]
        self._keep(key, rows, sum(r.numel() * 2 for r in rows))
        return rows

    def get_each(self, keys: Sequence[Any], compute: Callable[[list[int]], list[torch.Tensor]]
                 ) -> list[torch.Tensor]:
        """Per-row bf16 log-probs kept row by row (a verification pass's baseline side): ``compute(missing)`` gives
        the rows of ``keys`` not kept yet, so a variant whose batches differ reuses what an earlier one computed."""
        missing = [i for i, k in enumerate(keys) if k not in self._store]
        got = dict(zip(missing, (r.to(torch.bfloat16) for r in compute(missing)))) if missing else {}
        for i, row in got.items():
            self._keep(keys[i], row, row.numel() * 2)
        return [got[i] if i in got else self._store[k] for i, k in enumerate(keys)]

    def get(self, key: Any, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        if key in self._store:
            return self._store[key].float()
        value = compute().to(torch.bfloat16)
        self._keep(key, value, value.numel() * 2)
        return value.float()  # the same rounding whether cached or not

    def _keep(self, key: Any, value: Any, size: int) -> None:
        """Keep ``value`` (``size`` bytes) under ``key`` if it fits the budget."""
        if self.used + size <= self.max_bytes:
            self._store[key] = value
            self.used += size


def encode_answers(tokenizer: Any, answers: Sequence[str]) -> Any:
    """The answers as teacher-forced (right-padded ids + mask, no special tokens; an empty answer is EOS)."""
    saved = tokenizer.padding_side
    tokenizer.padding_side = "right"
    try:
        return tokenizer([a if a else tokenizer.eos_token for a in answers], return_tensors="pt", padding=True,
                         add_special_tokens=False)
    finally:
        tokenizer.padding_side = saved


def _baseline_pass(base_model: Any, tokenizer: Any, prompts: Sequence[tuple[str, bool]], ans: Any,
                   cache: BaselineLogprobCache, cache_key: Any, prefix_len: int,
                   snapshot: PromptKV | None = None, observe: Callable[..., None] | None = None,
                   per_row: bool = False) -> tuple[Any, tuple]:
    """The baseline's answer log-probs (cached under ``cache_key``) and the (rows, head, args) a variant reuses.
    ``snapshot``: the baseline's prompt K/V kept from its generation (``backends.inprocess.snapshots``), used instead of
    a prompt prefill (then kept for KV-only variants as a prefill's would be). ``observe``: handed the prompt K/V of the
    baseline's own prefill when there is no snapshot (a warm run), so the next variant's pass starts from them.
    ``per_row``: a list of bf16 log-probs [n, vocab] per row (its real answer positions; cached under
    ``("rows", key)``) instead of one padded float [batch, answer, vocab] tensor."""
    ids = encode_prompts(tokenizer, prompts)
    rows = [x[prefix_len:] for x in ids]
    args = (tokenizer.pad_token_id, ans["input_ids"], ans["attention_mask"])
    head = ids[0][:prefix_len]

    def compute() -> Any:
        if snapshot is None:
            with observe_prefills(observe):  # the baseline's prefill only: the variant's own prefill is not observed
                return prefill_answer_logprobs(base_model, rows, encode_prefix(base_model, head), None, *args,
                                               logit_rows=per_row)
        return snapshot_answer_logprobs(base_model, snapshot, None, *args[1:], logit_rows=per_row)
    if per_row:
        return cache.get_rows(("rows", cache_key), lambda: packed_logprobs(compute())), (rows, head, args)
    return cache.get(cache_key, compute), (rows, head, args)


@torch.no_grad()
def baseline_answer_logprobs(base_model: Any, tokenizer: Any, prompts: Sequence[tuple[str, bool]],
                             answers: Sequence[str], base_cache: BaselineLogprobCache | None = None,
                             cache_key: Any = None, prefix_len: int = 0) -> tuple[torch.Tensor, list[list[int]]]:
    """The baseline's full-vocabulary log-probs [batch, answer_len, vocab] at each answer token (bf16-rounded, as
    ``teacher_forced_kld`` compares them) and each answer's token ids (unpadded)."""
    ans = encode_answers(tokenizer, answers)
    cache = base_cache if base_cache is not None and cache_key is not None else BaselineLogprobCache(0)
    base_lp, _ = _baseline_pass(base_model, tokenizer, prompts, ans, cache, cache_key, prefix_len)
    ids = [row[:int(m.sum())].tolist() for row, m in zip(ans["input_ids"], ans["attention_mask"])]
    return base_lp, ids


@torch.no_grad()
def teacher_forced_kld(base_model: Any, var_model: Any, tokenizer: Any, prompts: Sequence[tuple[str, bool]],
                       answers: Sequence[str], make_cache: Callable[[], Any] | None = None,
                       base_cache: BaselineLogprobCache | None = None, cache_key: Any = None,
                       prefix_len: int = 0, var_snapshot: PromptKV | None = None,
                       base_snapshot: PromptKV | None = None, observe_base: Callable[..., None] | None = None
                       ) -> list[tuple[list[float], int, int]]:
    """Per sample: (KL(base || variant) per answer token, top-1 agreements, answer tokens) for one batch.

    With ``base_cache`` and ``cache_key`` the baseline's log-probs of this batch are computed once and reused.
    ``prefix_len`` tokens shared by every prompt are encoded once per model and batch, as the decoder does.
    ``var_snapshot``: the variant's own prompt K/V, last logits and mask for this batch, kept from its generation
    (``backends.inprocess.snapshots``); used instead of a prompt prefill when its cache takes an exact prefill.
    ``base_snapshot``: the same for the baseline, kept from the baseline's generation; without it, ``observe_base`` is
    handed the baseline's prompt K/V from its prefill (``engine.observe_prefills``' observer)."""
    ans = encode_answers(tokenizer, answers)
    cache = base_cache if base_cache is not None and cache_key is not None else BaselineLogprobCache(0)
    base_lp, (rows, head, args) = _baseline_pass(base_model, tokenizer, prompts, ans, cache, cache_key,
                                                 prefix_len, base_snapshot, observe_base, per_row=True)
    var_cache = make_cache() if make_cache else None
    if var_snapshot is not None and exact_prefill(var_cache):
        var_rows = snapshot_answer_logprobs(var_model, var_snapshot, var_cache, *args[1:], logit_rows=True)
    elif var_model is base_model and exact_prefill(var_cache) and base_snapshot is not None:
        var_rows = snapshot_answer_logprobs(var_model, base_snapshot, var_cache, *args[1:], logit_rows=True)
    else:
        prefix = encode_prefix(var_model, head, var_cache)
        var_rows = prefill_answer_logprobs(var_model, rows, prefix, var_cache, *args, logit_rows=True)
    return packed_kld(base_lp, var_rows)


POSITIONS = 512  #: answer positions per call of the vocabulary-sized work (a float [512, 49152] is 100 MB)


Row = torch.Tensor | tuple[torch.Tensor, ...]  #: one row's positions [n, vocab], or its pieces in order


def row_len(row: Row) -> int:
    """How many positions ``row`` holds."""
    return row.shape[0] if isinstance(row, torch.Tensor) else sum(p.shape[0] for p in row)


def position_chunks(rows: Sequence[Row]) -> Iterator[torch.Tensor]:
    """The rows' positions stacked in order, in chunks of at least ``POSITIONS`` positions (the last may be
    shorter), each one copy of its pieces. No chunk holds a single position unless there is only one: a
    one-position reduction over the vocabulary splits across threads and rounds differently from the padded
    batch's, whose every reduction is one position's."""
    pieces = [p for r in rows for p in ((r,) if isinstance(r, torch.Tensor) else r) if p.shape[0]]
    total, cur, n = sum(p.shape[0] for p in pieces), [], 0
    for i, p in enumerate(pieces):
        cur.append(p)
        n += p.shape[0]
        total -= p.shape[0]
        if (n >= POSITIONS and total != 1) or i == len(pieces) - 1:
            yield torch.cat(cur)
            cur, n = [], 0


def split_rows(values: torch.Tensor, rows: Sequence[Row]) -> list[torch.Tensor]:
    """``values`` over the stacked positions of ``rows`` (``position_chunks``' order), split back per row."""
    return list(torch.split(values, [row_len(r) for r in rows]))


def packed_logprobs(logit_rows: Sequence[Row]) -> list[torch.Tensor]:
    """bf16 log-probs per row from its logits, computed over every row's positions at once, in chunks."""
    out = torch.cat([F.log_softmax(c.float(), dim=-1).to(torch.bfloat16) for c in position_chunks(logit_rows)])
    return split_rows(out, logit_rows)


def packed_kld(base_rows: Sequence[Row], var_logit_rows: Sequence[Row]
               ) -> list[tuple[list[float], int, int]]:
    """Per row (KL(base || variant) per answer token, top-1 agreements, tokens) from the baseline's bf16 log-probs
    and the variant's logits at the same positions: the variant's log-probs rounded to bf16 like the cached
    baseline's (identical inputs give 0), the vocabulary-sized work over real answer positions only, in chunks.
    The same values as over the padded batch: a position's log-softmax, KL and argmax read that position alone."""
    kls, agrees = [], []
    for b, v in zip(position_chunks(base_rows), position_chunks(var_logit_rows)):
        var = F.log_softmax(v.float(), dim=-1).to(torch.bfloat16).float()
        base = b.float()
        kls.append((base.exp() * (base - var)).sum(-1).clamp(min=0.0))
        agrees.append(base.argmax(-1) == var.argmax(-1))
    kl, agree = split_rows(torch.cat(kls), base_rows), split_rows(torch.cat(agrees), base_rows)
    return [(k.tolist(), int(a.sum()), int(a.shape[0])) for k, a in zip(kl, agree)]

