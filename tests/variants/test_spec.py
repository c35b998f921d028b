"""The variant spec grammar: valid forms parse to the right settings, invalid ones raise one-line errors."""
import pytest

from evalsuite.errors import SpecError
from evalsuite.variants.spec import parse_variant, parse_variant_list, variant_from_dict


@pytest.mark.parametrize("text,fmt,bits,group", [
    ("bf16", "none", 16, None), ("w8", "int", 8, None), ("w4", "int", 4, 128), ("w4g64", "int", 4, 64),
    ("w4g128", "int", 4, 128), ("W2G32", "int", 2, 32), ("wf8", "float8", 8, None),
])
def test_weight_forms(text, fmt, bits, group):
    spec = parse_variant(text)
    assert (spec.weights.fmt, spec.weights.bits, spec.weights.group) == (fmt, bits, group)
    assert spec.kv is None
    assert spec.weights.exclude == ("lm_head",)


def test_kv_forms_and_combination():
    s = parse_variant("w4g64+kv4g32")
    assert s.weights.group == 64 and s.kv.bits == 4 and s.kv.group == 32 and s.kv.backend == "evalsuite"
    assert s.canonical == "w4g64+kv4g32r128"
    s = parse_variant("kv2g32r64ktpq")
    assert s.weights.fmt == "none" and s.kv.residual == 64 and s.kv.key_axis == "token"
    assert s.kv.prefill == "quantized" and s.canonical == "kv2g32r64ktpq"
    assert parse_variant("kvf8e5").kv.fmt == "fp8e5"
    hf = parse_variant("kvhf2").kv
    assert hf.backend == "hf" and hf.bits == 2 and hf.group == 64
    assert parse_variant(parse_variant("w8+kvf8e4g64").canonical) == parse_variant("w8+kvf8e4g64")


@pytest.mark.parametrize("bad", ["", "w3", "w4g0", "w4g48", "w8g64", "wf8g32", "kv3", "kvhf8", "kvhf4kt",
                                 "kv4+w4", "w4+kv4+kv8", "bf16+", "+kv4", "foo", "kv4g32x"])
def test_invalid_specs_raise_one_line(bad):
    with pytest.raises(SpecError) as err:
        parse_variant(bad)
    msg = str(err.value)
    assert "\n" not in msg and "valid forms" in msg


def test_list_and_duplicates():
    assert [s.name for s in parse_variant_list("bf16, w8 ,w4g64")] == ["bf16", "w8", "w4g64"]
    with pytest.raises(SpecError, match="twice"):
        parse_variant_list("w8,w8")


def test_yaml_form_equivalent_to_string():
    d = {"weights": {"fmt": "int", "bits": 4, "group": 64}, "kv": {"bits": 4, "group": 32}}
    assert variant_from_dict(d).canonical == parse_variant("w4g64+kv4g32").canonical
    named = variant_from_dict({"name": "fast", "spec": "w4g64", "weights": {"exclude": []}})
    assert named.name == "fast" and named.weights.exclude == () and named.weights.group == 64
    with pytest.raises(SpecError):
        variant_from_dict({"weights": {"fmt": "int", "bits": 3}})
    with pytest.raises(SpecError):
        variant_from_dict({"kv": {"nonsense": 1}})
