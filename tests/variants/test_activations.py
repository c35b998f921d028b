"""Weight + activation quantization (w8a8, w4a8, wf8af8): grammar, calibration, bytes, real effect on logits."""
import pytest
import torch

from evalsuite.errors import SpecError
from evalsuite.variants.activations import DEFAULT_CALIB, calibration_passages
from evalsuite.variants.build import build_variant
from evalsuite.variants.memory import held_bytes
from evalsuite.variants.spec import parse_variant, variant_from_dict


@pytest.mark.parametrize("text,name,act", [("w8a8", "w8a8", "int8"), ("w4a8", "w4g128a8", "int8"),
                                           ("w4g64a8c8", "w4g64a8c8", "int8"), ("wf8af8", "wf8af8", "float8")])
def test_grammar_and_round_trip(text, name, act):
    v = parse_variant(text)
    assert v.name == name and v.weights.activations == act
    assert variant_from_dict(v.to_dict()).weights == v.weights
    assert "activations" not in parse_variant("w8").to_dict()["weights"]


@pytest.mark.parametrize("bad", ["w8a8[keep=l0]", "bf16a8", "w8a8c0", "w8a4", "w4g64[w8a8=l0]"])
def test_bad_activation_specs(bad):
    with pytest.raises(SpecError):
        parse_variant(bad)


def test_calibration_text_is_shipped_and_seeded():
    assert calibration_passages(DEFAULT_CALIB) == calibration_passages(DEFAULT_CALIB)
    many = calibration_passages(64)
    assert len(many) == 64 and len(set(many)) == 64 and sum(len(p.split()) for p in many[:20]) > 400


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits.float()


@pytest.mark.parametrize("spec,weights_only", [("w8a8", "w8"), ("w4a8", "w4"), ("wf8af8", "wf8")])
def test_activations_quantized_and_bytes_unchanged(tiny, spec, weights_only):
    from optimum.quanto import QModuleMixin

    v, w = build_variant(tiny, parse_variant(spec)), build_variant(tiny, parse_variant(weights_only))
    mods = [m for m in v.model.modules() if isinstance(m, QModuleMixin)]
    assert mods and all(m.activation_qtype is not None for m in mods)
    assert all(float(m.input_scale) != 1.0 for m in mods), "calibration set the input scales"
    assert v.weights == w.weights and v.weights.measured == held_bytes(v.model)  # activations add no weight bytes
    ids = torch.randint(0, 1000, (1, 16))
    ref, act, wo = _logits(tiny.model, ids), _logits(v.model, ids), _logits(w.model, ids)
    assert not torch.equal(act, wo) and (act - ref).abs().max() < 10 * (wo - ref).abs().max() + 1.0
    from tests.conftest import greedy_answers
    from evalsuite.models import wrap_model

    from tests.toytask import CopyTask

    samples = CopyTask().samples({"n": 2}, 0)
    assert len(greedy_answers(wrap_model(v.model, tiny.tokenizer, "v"), samples, max_new_tokens=4)) == 2
