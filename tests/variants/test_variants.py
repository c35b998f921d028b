"""Weight variants: byte accounting against the formula, and what quantization does to logits."""
import pytest
import torch

from evalsuite.variants.build import build_variant
from evalsuite.variants.memory import held_bytes
from evalsuite.variants.spec import parse_variant
from evalsuite.variants.weights import effective_group


def _linear_params(model):
    return sum(m.weight.numel() for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and n != "lm_head")


def test_baseline_is_not_copied_and_bytes_are_dtype_bytes(tiny):
    v = build_variant(tiny, parse_variant("bf16"))
    assert v.model is tiny.model
    n_unique = sum(p.numel() for p in tiny.model.parameters())  # parameters() dedupes tied weights
    assert v.weights.formula == n_unique * 2
    assert abs(v.weights.measured - v.weights.formula) <= 4096  # rotary buffers


@pytest.mark.parametrize("spec,bits,group", [("w8", 8, None), ("w4g32", 4, 32), ("w4g64", 4, 64),
                                              ("w4g128", 4, 128), ("w2g32", 2, 32)])
def test_measured_bytes_match_formula(tiny, spec, bits, group):
    v = build_variant(tiny, parse_variant(spec))
    q = _linear_params(tiny.model)
    assert v.weights.quantized_params == q
    # formula by hand: payload + metadata (int4/int2: scale + zero point per group; int8: one scale per row)
    rows = sum(m.weight.shape[0] for n, m in tiny.model.named_modules()
               if isinstance(m, torch.nn.Linear) and n != "lm_head")
    meta = (q // group) * 2 * 2 if group else rows * 2
    unq = sum(p.numel() for p in tiny.model.parameters()) - q
    assert v.weights.formula == q * bits // 8 + meta + unq * 2
    assert abs(v.weights.measured - v.weights.formula) / v.weights.formula < 0.01
    assert v.weights.measured == held_bytes(v.model)
    assert v.weights.measured < build_variant(tiny, parse_variant("bf16")).weights.measured


def test_smaller_groups_cost_more_metadata(tiny):
    sizes = [build_variant(tiny, parse_variant(f"w4g{g}")).weights.measured for g in (32, 64, 128)]
    assert sizes[0] > sizes[1] > sizes[2]


def test_int4_changes_logits_bf16_does_not(tiny):
    ids = torch.randint(0, 1000, (1, 24))
    with torch.no_grad():
        ref = tiny.model(ids).logits.float()
        same = build_variant(tiny, parse_variant("bf16")).model(ids).logits.float()
        q4 = build_variant(tiny, parse_variant("w4g64")).model(ids).logits.float()
        again = tiny.model(ids).logits.float()
    assert torch.equal(ref, same)
    assert (ref - q4).abs().max() > 1e-3
    assert torch.equal(ref, again), "quantizing a variant must leave the baseline untouched"


def test_lm_head_excluded_by_default_and_configurable(tiny):
    from optimum.quanto import QModuleMixin

    from evalsuite.variants.spec import variant_from_dict

    v = build_variant(tiny, parse_variant("w8"))
    assert not isinstance(v.model.lm_head, QModuleMixin)
    assert isinstance(v.model.model.layers[0].self_attn.q_proj, QModuleMixin)
    v2 = build_variant(tiny, variant_from_dict({"spec": "w8", "weights": {"exclude": ["lm_head", "*.mlp.*"]}}))
    assert not isinstance(v2.model.model.layers[0].mlp.up_proj, QModuleMixin)
    assert v2.weights.measured > v.weights.measured


def test_effective_group_follows_quanto_rule():
    assert effective_group(1536, 128) == 128
    assert effective_group(576, 128) == 96
    assert effective_group(576, 64) == 64
