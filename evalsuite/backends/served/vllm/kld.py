"""Teacher-forced KLD between two vLLM servers over the baseline's answer, from ``prompt_logprobs``.

Both servers get the *same token ids* (prompt + the baseline's answer, tokenized by the baseline tokenizer; the
pairing check proved the servers tokenize alike) as one ``/v1/completions`` request with ``prompt_logprobs: K`` and
``max_tokens: 1``. At every answer position each returns the log-prob of the answer token and of its top-K tokens
(ids, exact log-probs).

**It reads the quantized cache.** vLLM's CPU attention backend (``vllm/v1/attention/backends/cpu_attn.py``) first
writes the step's K/V into the paged cache (``do_kv_cache_update`` -> ``cpu_attn_reshape_and_cache``, which
quantizes to fp8) and then runs ``cpu_attention_with_kv_cache`` over the *cache* for every query, prefill
included; so in one prefill over prompt + answer, each answer token attends to fp8 K/V exactly as a decode step
does (unlike transformers' ``QuantizedCache``, see ``backends/inprocess/kld.py``). ``tests/backends/served`` proves it:
fp8 KV gives a non-zero KLD, bf16 against itself exactly zero. (A prefix-cached two-step request would not help on vLLM
V1: it skips the prefix cache for requests that ask for prompt log-probs.)

**Method per row.** ``served-full``: ``prompt_logprobs: -1`` (the whole vocabulary, exact KL) while
(prompt + answer) x vocab <= ``FULL_VOCAB_MAX`` numbers (``$EVALSUITE_VLLM_FULL_VOCAB_MAX``, default 2^21: vLLM
returns every prompt position, ~76 bytes of JSON per number; measured on the embedded model, 44 positions x 49,152
= 2.2M numbers were 164 MB and 57 s on two busy cores, against 16 kB and 2 s at top-5). Else ``served-topk``: KL
over the partition {tokens both servers listed (their top-K ∪ the answer token)} ∪ {rest of the vocabulary, one
bucket}; both sides are exact on that partition, so it is a lower bound on the full KL (log-sum inequality) and
exactly 0 for identical distributions.
"""
from __future__ import annotations

import math
import os
from typing import Any, Sequence

FULL = "served-full"
TOPK = "served-topk"
FULL_VOCAB_MAX = int(os.environ.get("EVALSUITE_VLLM_FULL_VOCAB_MAX", 1 << 21))  # (prompt+answer) x vocab
TOP_K = 20
METHOD_TEXT = ("vLLM baseline and variants on the same engine, teacher-forced on the baseline's answer ids via "
               "prompt_logprobs (the CPU backend attends over the quantized paged cache in prefill too): "
               f"'{FULL}' exact over the full vocabulary where (prompt+answer) x vocab <= {FULL_VOCAB_MAX}, else "
               f"'{TOPK}' over both servers' top-{TOP_K} + one rest bucket (a lower bound); "
               "evalsuite/backends/served/vllm/kld.py")

Position = dict[int, float]  # token id -> log-prob at one position


def method_for(n_ids: int, vocab: int, bound: int = FULL_VOCAB_MAX) -> tuple[str, int]:
    """(method, the ``prompt_logprobs`` to ask for) for a request of ``n_ids`` tokens."""
    return (FULL, -1) if n_ids * vocab <= bound else (TOPK, TOP_K)


def prompt_logprobs(client: Any, ids: Sequence[int], k: int) -> list[Position | None]:
    """Per prompt position: {token id: log-prob} (the first is None), from one completions request."""
    body: dict[str, Any] = {"prompt": list(ids), "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": k}
    if client.served_model:
        body["model"] = client.served_model
    out = client.post("/completions", body)
    raw = ((out.get("choices") or [{}])[0]).get("prompt_logprobs") or []
    return [None if p is None else {int(t): float(v["logprob"] if isinstance(v, dict) else v)
                                    for t, v in p.items()} for p in raw]


def position_kl(p: Position, q: Position, answer_id: int, full: bool) -> float:
    """KL(p || q) at one position: exact when ``full``, else over {common listed ids} ∪ {rest}."""
    common = set(p) & set(q) if not full else set(p)
    common.add(answer_id)
    kl = 0.0
    p_s = q_s = 0.0
    for t in common:
        lp, lq = p.get(t), q.get(t)
        if lp is None or lq is None:
            continue
        pi, qi = math.exp(lp), math.exp(lq)
        kl += pi * (lp - lq)
        p_s, q_s = p_s + pi, q_s + qi
    if not full:
        p_rest, q_rest = max(1.0 - p_s, 0.0), max(1.0 - q_s, 1e-12)
        if p_rest > 1e-12:
            kl += p_rest * math.log(p_rest / q_rest)
    return max(0.0, kl)


def answer_kld(base: Sequence[Position | None], var: Sequence[Position | None], answer_ids: Sequence[int],
               full: bool) -> tuple[list[float], int, int]:
    """(KL per answer token, top-1 agreements, tokens) over the last ``len(answer_ids)`` positions."""
    n = len(answer_ids)
    kls: list[float] = []
    agree = 0
    for p, q, aid in zip(base[len(base) - n:], var[len(var) - n:], answer_ids):
        if not p or not q:
            continue
        kls.append(position_kl(p, q, int(aid), full))
        agree += int(max(p, key=p.__getitem__) == max(q, key=q.__getitem__))
    return kls, agree, len(kls)
