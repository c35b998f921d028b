"""A variant that computes exactly what the baseline computes is recognised, and only then."""
from __future__ import annotations

import copy

import torch

from evalsuite.models import wrap_model
from evalsuite.variants.build import build_variant
from evalsuite.variants.identical import same_computation
from evalsuite.variants.spec import parse_variant
from tests.conftest import make_tiny_model


def on_int4_grid(tokenizer):
    """A tiny fp32 baseline whose linear weights already lie on w4g32's grid, as the embedded Q4_1 model's do:
    each group of 32 holds the codes 0..15 (both ends present) times its own power of two, so re-quantizing at
    g32 is exact (and at g64, which spans two scales, is not)."""
    model = make_tiny_model(len(tokenizer), dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in model.model.layers:
            for lin in [m for m in layer.modules() if isinstance(m, torch.nn.Linear)]:
                codes = torch.randint(0, 16, lin.weight.shape, generator=gen).view(-1, 32)
                codes[:, 0], codes[:, 1] = 0, 15
                scales = 2.0 ** -(4 + torch.arange(codes.shape[0]) % 3)
                lin.weight.copy_(((codes - 8).float() * scales[:, None]).view_as(lin.weight))
    return wrap_model(model, tokenizer, name="tiny-q4")


def test_same_computation_needs_every_bit_and_every_module_class(tokenizer):
    model = make_tiny_model(len(tokenizer), dtype=torch.float32)
    twin = copy.deepcopy(model)
    assert same_computation(twin, model)
    with torch.no_grad():
        twin.model.layers[1].mlp.down_proj.weight[3, 5] += 1e-6
    assert not same_computation(twin, model)
    other = copy.deepcopy(model)
    other.model.layers[0].mlp.act_fn = torch.nn.GELU()
    assert not same_computation(other, model)


def test_requantizing_onto_the_same_grid_is_recognised_and_other_variants_are_not(tokenizer):
    base = on_int4_grid(tokenizer)
    assert build_variant(base, parse_variant("w4g32"), kernels="dequantized").same_as_base
    assert not build_variant(base, parse_variant("w4g32"), kernels="quanto").same_as_base  # other kernels
    assert not build_variant(base, parse_variant("w4g64"), kernels="dequantized").same_as_base
    assert not build_variant(base, parse_variant("w4g32+kv4g32"), kernels="dequantized").same_as_base
    assert not build_variant(base, parse_variant("kv8"), kernels="dequantized").same_as_base
