"""Sensitivity on a tiny random model: per-unit passes reuse the baseline exactly, units differ, --fix keeps."""
import pytest
import torch

from evalsuite.sensitivity.fix import greedy_fix
from evalsuite.sensitivity.forward import Batch, single_pass
from evalsuite.sensitivity.measure import Measurer, kv_keep, only_layer, run_units
from evalsuite.sensitivity.report import resolve_top, load_ranking, write_results
from evalsuite.sensitivity.units import merged, quantize_units, swapped, weight_units
from evalsuite.variants.build import build_variant
from evalsuite.variants.spec import parse_variant

from tests.conftest import make_tiny_model


def _batches(n_layers: int = 4):
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(5, 1000, (int(n),), generator=g).tolist() for n in (40, 33, 51)]
    answers = [torch.randint(5, 1000, (int(n),), generator=g).tolist() for n in (9, 4, 12)]
    return [Batch(rows[:2], answers[:2], 0), Batch(rows[2:], answers[2:], 0)]


@pytest.fixture(scope="module")
def model():
    return make_tiny_model(1000, seed=5, layers=4)


def test_from_layer_pass_equals_full_pass(model):
    b = _batches()[0]
    full, hidden = single_pass(model, b, capture=True)
    assert len(hidden) == 4
    for start in (1, 3):
        part, _ = single_pass(model, b, start, hidden)
        assert torch.equal(part, full)  # layers below `start` are what the baseline computed


def test_units_swap_and_restore(model):
    spec = parse_variant("w4g32").weights
    units = weight_units(model, spec)
    assert [u.pattern for u in units] == ["l0", "l1", "l2", "l3"] and all(len(u.modules) == 7 for u in units)
    assert len(weight_units(model, spec, "module")) == 28
    q = quantize_units(model, spec, units[:1])
    before = model.model.layers[0].mlp.up_proj
    with swapped(model, q["l0"]):
        assert model.model.layers[0].mlp.up_proj is not before
    assert model.model.layers[0].mlp.up_proj is before
    assert weight_units(model, parse_variant("w4g32[keep=l1]").weights)[1].pattern == "l2"


def test_unit_kld_and_mixed_equals_built_variant(model, tiny):
    spec = parse_variant("w2g32+kv2g32r0")
    m = Measurer(model, _batches())
    sens, units, qunits = run_units(m, spec, "layer", log=lambda s: None)
    w = [r for r in sens.results if r.side == "weights"]
    kv = [r for r in sens.results if r.side == "kv"]
    assert len(w) == 4 and len(kv) == 4 and all(r.kld > 0 for r in sens.results)
    assert len({round(r.kld, 6) for r in w}) == 4  # layers differ
    assert m.weights({}).kld == 0.0 and m.kv(kv_keep(spec.kv, [0, 1, 2, 3])).kld == 0.0
    # the swapped-in whole variant measures what the built variant computes
    from evalsuite.models.loader import LoadedModel

    base = LoadedModel(model=model, tokenizer=None, name="tiny", source="memory", dtype="float32", fingerprint="-")
    built = build_variant(base, parse_variant("w2g32[keep=l1]"))
    b = _batches()[0]
    ref, _ = single_pass(built.model, b)
    with swapped(model, merged(qunits, ["l1"])):
        mine, _ = single_pass(model, b)
    assert torch.equal(ref, mine)
    assert only_layer(spec.kv, 0, 4).layer_bits == ((1, 3, 16),)


def test_greedy_fix_reaches_target_and_halves(model, tmp_path):
    spec = parse_variant("w2g32")
    m = Measurer(model, _batches())
    sens, _, qunits = run_units(m, spec, "layer", log=lambda s: None)
    res = greedy_fix(m, spec, sens, qunits, target=sens.variant_kld.kld / 2, max_keep_frac=1.0, log=lambda s: None)
    assert res.reached and res.after.kld < res.before.kld / 2
    assert res.keep[0] == sens.ranked()[0].unit  # most sensitive first
    assert parse_variant(res.proposed).weights.overrides[0][0] == "keep"
    capped = greedy_fix(m, spec, sens, qunits, target=0.0, max_keep_frac=0.3, log=lambda s: None)
    assert capped.kept_fraction <= 0.3 and not capped.reached and len(capped.keep) == 1
    path = write_results(tmp_path, {"variant": spec.name}, sens, res.to_dict())
    ranking = load_ranking(path)
    top2 = resolve_top("w2g32[keep=top2]", ranking)
    assert top2 == f"w2g32[keep={ranking[0].unit},{ranking[1].unit}]"
    assert resolve_top("w2g32[keep=top0]", ranking) == "w2g32"
    assert resolve_top("w2g32[keep=top0;w8=*.down_proj]", ranking) == "w2g32[w8=*.down_proj]"


def test_ablate_top_n_needs_a_ranking_and_resolves(tmp_path):
    from evalsuite.cli.ablate_cmd import ablate
    from evalsuite.errors import EvalsuiteError

    with pytest.raises(EvalsuiteError, match="sensitivity"):
        ablate.main(["--sweep", "w4g64[keep=top{0,2}]"], standalone_mode=False)
    bad = tmp_path / "r.json"
    bad.write_text("{}")
    with pytest.raises(EvalsuiteError, match="cannot read"):
        ablate.main(["--sweep", "w4g64[keep=top{0,2}]", "--sensitivity", str(bad)], standalone_mode=False)
