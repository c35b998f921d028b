"""Weight-only variants run dequantized once (the quality run) with quanto's exact values and packed byte counts."""
import pytest
import torch

from evalsuite.variants.build import build_variant
from evalsuite.variants.spec import parse_variant


def _quanto_modules(model):
    from optimum.quanto import QModuleMixin

    return {n: m for n, m in model.named_modules() if isinstance(m, QModuleMixin)}


@pytest.mark.parametrize("spec", ["w8", "w4g64", "w2g32", "wf8", "w4g64[keep=l0]"])
def test_dequantized_weights_equal_quanto_values_and_bytes_stay_packed(tiny, spec):
    packed = build_variant(tiny, parse_variant(spec), kernels="quanto")
    plain = build_variant(tiny, parse_variant(spec), kernels="dequantized")
    qmods = _quanto_modules(packed.model)
    assert qmods and packed.kernels == "quanto" and plain.kernels == "dequantized"
    assert not _quanto_modules(plain.model), "every weight-only quanto module is replaced"
    for name, mod in qmods.items():
        lin = plain.model.get_submodule(name)
        assert type(lin) is torch.nn.Linear
        assert torch.equal(lin.weight, mod.qweight.dequantize()), name
    assert plain.weights == packed.weights  # bytes come from the packed form, measured before unpacking


def test_dequantized_logits_match_quanto_modules(tiny):
    ids = torch.randint(0, 1000, (2, 16))
    with torch.no_grad():
        a = build_variant(tiny, parse_variant("w4g64"), kernels="quanto").model(ids).logits.float()
        b = build_variant(tiny, parse_variant("w4g64"), kernels="dequantized").model(ids).logits.float()
        ref = tiny.model(ids).logits.float()
    assert torch.allclose(a, b, atol=1e-2, rtol=1e-2)
    assert (a - ref).abs().max() > 1e-3  # still the quantized model, not the baseline


def test_baseline_and_kv_only_variants_are_not_copied(tiny):
    for spec in ("bf16", "kv4g32"):
        v = build_variant(tiny, parse_variant(spec), kernels="dequantized")
        assert v.model is tiny.model and v.kernels == "quanto"  # nothing was quantized, nothing unpacked


def test_activation_quantized_modules_keep_quanto(tiny):
    v = build_variant(tiny, parse_variant("w8a8c2"), kernels="dequantized")
    assert _quanto_modules(v.model), "W8A8 needs quanto's activation quantization at run time"


def test_unknown_kernels_is_refused(tiny):
    with pytest.raises(ValueError, match="kernels"):
        build_variant(tiny, parse_variant("w8"), kernels="fast")


@pytest.mark.slow
def test_run_records_how_weights_executed(tiny, tmp_path):
    from tests.conftest import prepared, run_model

    store = run_model(tiny, tmp_path / "run", variants=("bf16", "w4g64", "kv4g32"),
                      tasks=prepared(n=2), kld=False)
    infos = store.variant_infos()
    assert infos["w4g64"].kernels == "dequantized"
    kv = next(name for name in infos if name.startswith("kv4g32"))
    assert infos[kv].kernels is None and infos["bf16"].kernels is None
    assert store.meta()["settings"]["weight_kernels"] == "dequantized"
