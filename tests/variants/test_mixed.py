"""Mixed-precision weights: grammar round trip, which modules get which precision, exact byte accounting."""
import pytest
import torch

from evalsuite.errors import EvalsuiteError, SpecError
from evalsuite.capacity.bytes import weight_breakdown
from evalsuite.capacity.shape import shape_from_config
from evalsuite.variants.build import build_variant
from evalsuite.variants.mixed import resolve_rules
from evalsuite.variants.spec import parse_variant, parse_variant_list, variant_from_dict


@pytest.mark.parametrize("text", ["w4g64[keep=l0,l1.mlp]", "w4g128[w8=*.down_proj]", "w2g32[w4g32=l0-1;keep=lm_x]",
                                  "w4g64[keep=l0]+kv4g32r128[l0-1=8;l3=16]", "wf8[keep=*.q_proj]"])
def test_name_round_trips(text):
    spec = parse_variant(text)
    assert parse_variant(spec.name) == spec
    assert variant_from_dict(spec.to_dict() | {"kv": spec.kv.to_dict() if spec.kv else None}).weights == spec.weights


@pytest.mark.parametrize("bad", ["w4g64[]", "bf16[keep=l0]", "w4g64[keep=l0;keep=l1]", "w4g64[keep=a/b]",
                                 "w4g64[keep=]", "w4g64[keep=l0", "w4g64[bf17=l0]", "w4g64[w8]"])
def test_bad_options_one_line(bad):
    with pytest.raises(SpecError) as err:
        parse_variant(bad)
    assert "\n" not in str(err.value)


def test_list_split_respects_brackets():
    names = [s.name for s in parse_variant_list("bf16,w4g64[keep=l0,l1],w8")]
    assert names == ["bf16", "w4g64[keep=l0,l1]", "w8"]


def test_yaml_form():
    spec = variant_from_dict({"spec": "w4g64", "weights": {"keep": ["l0"], "overrides": {"w8": ["*.down_proj"]}}})
    assert spec.name == "w4g64[keep=l0;w8=*.down_proj]"


def test_rules_first_match_wins_and_unmatched_is_error():
    names = [f"model.layers.{i}.{m}" for i in range(12) for m in ("self_attn.q_proj", "mlp.down_proj")]
    rules = resolve_rules(names + ["lm_head"], parse_variant("w4g64[keep=l1;w8=*.down_proj]").weights)
    assert "lm_head" not in rules  # excluded by default
    assert rules["model.layers.1.mlp.down_proj"] is None  # keep comes first
    assert rules["model.layers.10.mlp.down_proj"].bits == 8  # l1 does not match layer 10
    assert rules["model.layers.10.self_attn.q_proj"].bits == 4
    with pytest.raises(EvalsuiteError, match="matches no"):
        resolve_rules(names, parse_variant("w4g64[keep=l99]").weights)
    with pytest.raises(EvalsuiteError, match="sensitivity"):
        resolve_rules(names, parse_variant("w4g64[keep=top2]").weights)


def test_mixed_build_measured_equals_formula_and_planner(tiny):
    from optimum.quanto import QModuleMixin

    spec = parse_variant("w4g64[keep=l0;w8=*.down_proj]")
    v = build_variant(tiny, spec)
    layers = v.model.model.layers
    assert not any(isinstance(m, QModuleMixin) for m in layers[0].modules())
    assert layers[1].mlp.down_proj.weight_qtype.bits == 8 and layers[1].mlp.up_proj.weight_qtype.bits == 4
    plain = build_variant(tiny, parse_variant("w4g64"))
    assert v.weights.measured > plain.weights.measured
    for built in (v, plain):  # exact: payload + scales/zeros + unquantized; buffers = rotary + quanto's scalars
        buffers = sum(b.numel() * b.element_size() for b in built.model.buffers())
        assert built.weights.measured == built.weights.formula + buffers
    plan = weight_breakdown(shape_from_config(tiny.model.config.to_dict()), spec.weights)
    assert plan.total == v.weights.formula and plan.quantized_params == v.weights.quantized_params


def test_unmatched_pattern_fails_at_build(tiny):
    with pytest.raises(EvalsuiteError, match="l7"):
        build_variant(tiny, parse_variant("w4g64[keep=l7]"))


def test_kept_layer_outputs_unchanged(tiny):
    ids = torch.randint(0, 1000, (1, 12))
    v = build_variant(tiny, parse_variant("w4g64[keep=l0]"))
    with torch.no_grad():
        ref = tiny.model(ids, output_hidden_states=True)
        out = v.model(ids, output_hidden_states=True)
    assert torch.equal(ref.hidden_states[1], out.hidden_states[1])  # layer 0 kept: identical output
    assert not torch.equal(ref.logits, out.logits)  # layer 1 quantized
    with pytest.raises(EvalsuiteError, match="every Linear"):
        build_variant(tiny, parse_variant("w4g64[keep=l0-1]"))
