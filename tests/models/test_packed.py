"""evalsuite.models.packed: bf16 Linear layers from prepacked oneDNN weights, never from stale ones."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from evalsuite.models import packed
from tests.conftest import make_tiny_model

pytestmark = pytest.mark.skipif(not packed.supported(), reason="this CPU/torch runs no oneDNN bf16 matmuls")


def _linear(out: int = 96, inp: int = 64, bias: bool = False) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(inp, out, bias=bias).to(torch.bfloat16).eval()


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def test_a_packed_linear_computes_what_the_plain_one_computes():
    model = torch.nn.Sequential(_linear(), _linear(48, 96, bias=True))
    x = torch.randn(3, 5, 64).to(torch.bfloat16)
    with torch.no_grad():
        want = model(x)
        assert packed.pack_linears(model) == 2 and packed.packed_model(model)
        got = model(x)
    assert got.shape == want.shape and _close(got, want)
    assert packed.setting(model) == "packed1"


def test_a_weight_changed_in_place_or_replaced_is_packed_again():
    lin = _linear()
    packed.pack_linears(lin)
    x = torch.randn(4, 64).to(torch.bfloat16)
    with torch.no_grad():
        before = lin(x)
        lin.weight.mul_(2)  # in place: the version counter moves
        assert _close(lin(x), 2 * before) and not _close(lin(x), before)
        lin.weight = torch.nn.Parameter(torch.zeros_like(lin.weight), requires_grad=False)
        assert torch.count_nonzero(lin(x)) == 0


def test_weights_made_in_inference_mode_are_packed_too():
    with torch.inference_mode():
        lin = _linear()
        x = torch.randn(4, 64).to(torch.bfloat16)
    packed.pack_linears(lin)
    with torch.no_grad():
        assert _close(lin(x), F.linear(x, lin.weight))


def test_a_deep_copy_runs_its_own_weights_and_leaves_the_original_alone():
    model = make_tiny_model(64)
    packed.pack_linears(model)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        want = model(input_ids=ids).logits
        twin = copy.deepcopy(model)
        assert packed.packed_model(twin)
        for p in twin.parameters():
            p.mul_(0.5)
        assert not _close(twin(input_ids=ids).logits, want)
        assert torch.equal(model(input_ids=ids).logits, want)


def test_a_call_that_tracks_gradients_falls_back_to_the_plain_linear():
    lin = _linear()
    packed.pack_linears(lin)
    x = torch.randn(2, 64).to(torch.bfloat16)
    out = lin(x)  # weight.requires_grad and grad mode on: the packed op has no backward
    assert out.grad_fn is not None and torch.equal(out.detach(), F.linear(x, lin.weight.detach()))


def test_a_layer_another_library_wrapped_or_emptied_is_left_alone():
    wrapped, emptied = _linear(), _linear()
    wrapped.forward = lambda x: torch.zeros(1)  # e.g. compressed-tensors' quantized forward, set on the instance
    del emptied.weight  # e.g. compressed-tensors' packed form: other parameters instead of ``weight``
    model = torch.nn.Sequential(wrapped, emptied, _linear())
    assert packed.pack_linears(model) == 1
    assert not packed.is_packed(wrapped) and not packed.is_packed(emptied) and packed.is_packed(model[2])
    assert torch.equal(wrapped(torch.ones(1)), torch.zeros(1))


def test_float32_layers_are_left_plain():
    lin = torch.nn.Linear(8, 8)
    assert packed.pack_linears(lin) == 0 and packed.setting(lin) == "plain"


def test_it_is_off_when_the_environment_says_so(monkeypatch):
    monkeypatch.setenv(packed.ENV, "0")
    model = make_tiny_model(64)
    assert packed.pack_linears(model) == 0 and not packed.packed_model(model)


def test_nothing_is_packed_when_the_copies_would_not_fit_in_memory(monkeypatch):
    model = make_tiny_model(64)
    assert packed.pack_linears(model) > 0
    twin = copy.deepcopy(model)  # packed modules carried over, unpacked weights
    monkeypatch.setattr(packed, "available_bytes", lambda: 1024)
    twin.lm_head = torch.nn.Linear(128, 64, bias=False).to(torch.bfloat16)  # a new module to pack
    assert packed.pack_linears(twin) == 0
    assert not any(packed.is_packed(m) for m in twin.modules())  # all or none


def test_a_variant_built_from_a_packed_baseline_is_packed_too(tiny):
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import parse_variant

    assert packed.packed_model(tiny.model)
    built = build_variant(tiny, parse_variant("w4g32"), kernels="dequantized")
    assert built.kernels == "dequantized" and packed.packed_model(built.model)
