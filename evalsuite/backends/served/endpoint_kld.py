"""Approximate KL divergence between two endpoints from their top-k logprobs (no teacher forcing over the API).

At answer position t the two servers saw the same context only while their generated tokens agree, so the
comparison runs over the *common prefix* of the baseline's and the variant's token sequences (plus the first
position where they differ: its context is still shared). At each such position both distributions are restricted
to the baseline's top-k tokens and renormalised; a token the variant did not list gets the variant's smallest
listed logprob (an upper bound on its true probability). The result is KL(P_k || Q_k) over truncated, renormalised
distributions: a lower-resolution proxy of the in-process teacher-forced KLD, and over fewer tokens when the
answers diverge early. ``n_tokens`` is the number of positions compared.
"""
from __future__ import annotations

import math
from typing import Sequence

Token = tuple[str, float, tuple[tuple[str, float], ...]]


def _renorm(lps: Sequence[float]) -> list[float]:
    m = max(lps)
    z = m + math.log(sum(math.exp(x - m) for x in lps))
    return [x - z for x in lps]


def position_kl(base_top: Sequence[tuple[str, float]], var_top: Sequence[tuple[str, float]]) -> float:
    """KL(P||Q) over the baseline's top-k set, both renormalised; missing variant tokens get its minimum."""
    if not base_top or not var_top:
        return float("nan")
    keys = [t for t, _ in base_top]
    q_map = dict(var_top)
    floor = min(q_map.values())
    p = _renorm([lp for _, lp in base_top])
    q = _renorm([q_map.get(k, floor) for k in keys])
    return max(0.0, sum(math.exp(pi) * (pi - qi) for pi, qi in zip(p, q)))


def topk_kld(base: Sequence[Token], var: Sequence[Token]) -> tuple[tuple[float, ...], int, int]:
    """(per-position KL, top-1 agreements, positions compared) over the shared-context positions."""
    kls: list[float] = []
    agree = 0
    for (bt, _, btop), (vt, _, vtop) in zip(base, var):
        kl = position_kl(btop, vtop)
        if math.isnan(kl):
            break
        kls.append(kl)
        b1 = max(btop, key=lambda x: x[1])[0]
        v1 = max(vtop, key=lambda x: x[1])[0]
        agree += int(b1 == v1)
        if bt != vt:  # the next position's contexts differ
            break
    return tuple(kls), agree, len(kls)
