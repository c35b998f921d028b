"""The served KLD's arithmetic: exact over the full vocabulary, a lower bound over top-k + a rest bucket."""
from __future__ import annotations

import math

import torch

from evalsuite.backends.served.vllm.kld import FULL, TOPK, answer_kld, method_for, position_kl


def _dist(logits: torch.Tensor) -> dict[int, float]:
    return {i: float(v) for i, v in enumerate(torch.log_softmax(logits.double(), -1))}


def _top(d: dict[int, float], k: int, keep: int) -> dict[int, float]:
    top = dict(sorted(d.items(), key=lambda kv: -kv[1])[:k])
    top[keep] = d[keep]
    return top


def test_full_is_exact_and_topk_a_lower_bound() -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        a, b = torch.randn(50, generator=g) * 2, torch.randn(50, generator=g) * 2
        p, q = _dist(a), _dist(b)
        exact = float(torch.nn.functional.kl_div(torch.log_softmax(b.double(), -1), torch.log_softmax(
            a.double(), -1), log_target=True, reduction="sum"))
        assert math.isclose(position_kl(p, q, 3, True), exact, rel_tol=1e-9)
        bound = position_kl(_top(p, 5, 3), _top(q, 5, 3), 3, False)
        assert 0.0 <= bound <= exact + 1e-12


def test_identical_is_zero() -> None:
    p = _dist(torch.randn(40))
    assert position_kl(p, dict(p), 1, True) == 0.0
    assert position_kl(_top(p, 4, 1), _top(p, 4, 1), 1, False) == 0.0
    kls, agree, n = answer_kld([None, p, p], [None, p, p], [1, 2], True)
    assert kls == [0.0, 0.0] and agree == 2 and n == 2


def test_method_bound() -> None:
    assert method_for(10, 1000) == (FULL, -1)
    assert method_for(100, 49152) == (TOPK, 20)
