"""Teacher-forced KLD of a *served* variant against an in-process baseline, from the server's prompt log-probs.

The server is sent prompt + the baseline's answer as one raw ``/completions`` prompt with ``echo`` and
``logprobs: K`` (llama.cpp; ``max_tokens: 1``, the one generated token is dropped), so at every answer position
it reports, for the *same context the baseline was teacher-forced on*, the log-prob of the answer token and its
top-K tokens. The baseline's distribution ``p`` is known over the full vocabulary (computed in-process); the
variant's ``q`` only on the set S of tokens it reported (the answer token and its top-K).

KL is computed over the partition {each token of S} ∪ {REST}, REST = every other token merged into one bucket:

    KL_S(p || q) = sum_{i in S} p_i log(p_i / q_i)  +  P_rest log(P_rest / Q_rest),
    P_rest = 1 - sum_S p_i,  Q_rest = 1 - sum_S q_i (both exact).

By the log-sum inequality (data processing) this is a **lower bound** on the full-vocabulary KL, tight when the
baseline puts little mass outside the variant's top-K or the two agree there; it is exactly 0 for identical
distributions. Tokens are matched by their text (servers key top-K lists by token string): a string that is not
exactly one baseline token (special tokens printing as "", partial UTF-8 bytes, collisions) goes to REST, which
keeps the bound sound. A position is used only when the server's token strings for the answer equal the
baseline tokenizer's, token for token; otherwise the sample is measured otherwise (``align_answer`` says why).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch

Entry = tuple[str, float, tuple[tuple[str, float], ...]]  # (token text, its log-prob, ((alt text, log-prob) ...))

METHOD = "served-tf-topk"
METHOD_TEXT = ("served variants: teacher-forced on the baseline's answer through the server's echoed prompt "
               "log-probs; KL over the variant's top-k tokens + one bucket for the rest of the vocabulary (a lower "
               "bound on the full KL; evalsuite/backends/served/kld.py)")


def token_texts(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token's own text as a server prints it (special tokens as "", partial UTF-8 bytes dropped)."""
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    toks = tokenizer.convert_ids_to_tokens(list(ids))
    return ["" if i in special else tokenizer.convert_tokens_to_string([t]).replace("\ufffd", "")
            for i, t in zip(ids, toks)]


def text_to_id(tokenizer: Any) -> dict[str, int]:
    """Token text -> id for texts that name exactly one token (empty and ambiguous texts are left out)."""
    seen: dict[str, int] = {}
    dup: set[str] = set()
    for i, t in enumerate(token_texts(tokenizer, range(len(tokenizer)))):
        if not t:
            continue
        if t in seen:
            dup.add(t)
        seen[t] = i
    return {t: i for t, i in seen.items() if t not in dup}


def align_answer(entries: Sequence[Entry], generated: int, expected: Sequence[str]) -> tuple[list[Entry], str]:
    """The server's entries for the answer tokens (those before its ``generated`` ones), or ([], why not)."""
    n = len(expected)
    end = len(entries) - generated
    if n == 0 or end - n < 0:
        return [], f"server returned {len(entries)} echoed tokens, fewer than the answer's {n}"
    seg = list(entries[end - n:end])
    for j, ((got, _, _), want) in enumerate(zip(seg, expected)):
        if got.replace("\ufffd", "") != want:
            return [], f"server tokenized the answer differently at token {j} ({got!r} vs {want!r})"
    return seg, ""


def partition_kl(base_lp: torch.Tensor, known: dict[int, float]) -> float:
    """KL(p || q) over {each known token} ∪ {rest}: ``base_lp`` the baseline's full log-probs at one position,
    ``known`` the variant's exact log-probs of some tokens (see the module docstring: a lower bound)."""
    lp = torch.log_softmax(base_lp.double(), dim=-1)
    if not known:
        return 0.0
    ids = torch.tensor(list(known), dtype=torch.long)
    q = torch.tensor(list(known.values()), dtype=torch.float64)
    p_log = lp[ids]
    kl = float((p_log.exp() * (p_log - q)).sum())
    mask = torch.ones_like(lp, dtype=torch.bool)
    mask[ids] = False
    p_rest = float(lp[mask].exp().sum()) if bool(mask.any()) else 0.0
    q_rest = max(1.0 - float(q.exp().sum()), 1e-12)
    if p_rest > 0:
        kl += p_rest * math.log(p_rest / q_rest)
    return max(0.0, kl)


def served_kld(base_lp: torch.Tensor, answer_ids: Sequence[int], seg: Sequence[Entry], vocab: dict[str, int],
               tokenizer: Any) -> tuple[list[float], int, int]:
    """(KL per answer token, top-1 agreements, tokens) from aligned server entries ``seg`` and the baseline's
    log-probs ``base_lp`` [answer_len, vocab]; ``vocab`` maps token text -> id (``text_to_id``). Top-1 agreement
    compares texts (the variant's top-1 is known only as text)."""
    kls: list[float] = []
    best_base = token_texts(tokenizer, base_lp[:len(seg)].argmax(-1).tolist())
    agree = 0
    for t, (aid, (_, lp, top)) in enumerate(zip(answer_ids, seg)):
        known = {vocab[s]: v for s, v in top if s in vocab}
        known[int(aid)] = lp  # the answer token's own log-prob is exact (its id is known)
        kls.append(partition_kl(base_lp[t], known))
        best = max(top, key=lambda x: x[1])[0] if top else None
        agree += int(best is not None and best == best_base[t])
    return kls, agree, len(kls)


def baseline_entries(base_lp: torch.Tensor, answer_ids: Sequence[int], tokenizer: Any, k: int) -> list[Entry]:
    """The baseline's answer as top-k entries (for the top-k fallback, ``endpoint_kld.topk_kld``)."""
    top = base_lp.topk(k, dim=-1)
    texts = token_texts(tokenizer, answer_ids)
    out: list[Entry] = []
    for t, aid in enumerate(answer_ids):
        alts = token_texts(tokenizer, top.indices[t].tolist())
        out.append((texts[t], float(base_lp[t, aid]), tuple(zip(alts, map(float, top.values[t].tolist())))))
    return out
