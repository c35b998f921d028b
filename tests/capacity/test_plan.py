"""The capacity/bandwidth planner: hand-computed parameter counts, bytes and crossovers for GQA/MHA/MQA configs,
agreement with the runtime weight formula on real (tiny) quantized models, and the CLI."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalsuite.cli.plan_cmd import parse_kv_list, parse_weight_list, plan
from evalsuite.errors import EvalsuiteError
from evalsuite.capacity import (count_params, kv_bytes_for_context, kv_bytes_per_token, load_config, make_plan,
                            parse_reserve, parse_size, shape_from_config, weight_breakdown)
from evalsuite.capacity.bytes import full_precision_tokens
from evalsuite.variants.spec import WeightSpec, parse_variant

CONFIGS = Path(__file__).parents[1] / "data" / "configs"
GIB = 2**30


def shape(name: str):
    return shape_from_config(load_config(CONFIGS / name))


def kv(text: str):
    return parse_variant(text).kv


# Hand counts: embed = vocab*hidden; per layer q,o = hidden*heads*hd, k,v = hidden*kv*hd, MLP = 3*hidden*inter,
# norms = 2*hidden; + final norm; lm_head = embed unless tied.
@pytest.mark.parametrize("name,total,kind,kv_bpt", [
    # Llama-3-8B: 2*128256*4096 + 32*(2*4096*4096 + 2*4096*1024 + 3*4096*14336 + 2*4096) + 4096
    ("llama3-8b.json", 8_030_261_248, "GQA", 2 * 32 * 8 * 128 * 2),
    # Llama-2-7B: 2*32000*4096 + 32*(4*4096*4096 + 3*4096*11008 + 2*4096) + 4096
    ("llama2-7b.json", 6_738_415_616, "MHA", 2 * 32 * 32 * 128 * 2),
    # Gemma-2B (MQA, tied, head_dim 256): 256000*2048 + 18*(2*2048*2048 + 2*2048*256 + 3*2048*16384 + 2*2048) + 2048
    ("gemma-2b-mqa.json", 2_506_172_416, "MQA", 2 * 18 * 1 * 256 * 2),
    # Qwen2.5-7B (q/k/v biases): 2*152064*3584 + 28*(2*3584*3584 + 2*3584*512 + 3584+2*512
    #                                             + 3*3584*18944 + 2*3584) + 3584
    ("qwen2.5-7b.json", 7_615_616_512, "GQA", 2 * 28 * 4 * 128 * 2),
    ("mistral-7b.json", 7_241_732_096, "GQA", 2 * 32 * 8 * 128 * 2),
    # SmolLM2-135M (tied): 49152*576 + 30*(2*576*576 + 2*576*192 + 3*576*1536 + 2*576) + 576
    ("smollm2-135m.json", 134_515_008, "GQA", 2 * 30 * 3 * 64 * 2),
])
def test_param_counts_and_bf16_kv(name, total, kind, kv_bpt):
    s = shape(name)
    assert count_params(s).total == total
    assert s.attention == kind
    assert kv_bytes_per_token(s, None) == kv_bpt
    assert weight_breakdown(s, WeightSpec()).total == 2 * total


def test_named_kv_bytes_per_token_values():
    assert kv_bytes_per_token(shape("llama3-8b.json"), None) == 131072
    assert kv_bytes_per_token(shape("llama2-7b.json"), None) == 524288
    assert count_params(shape("gemma-2b-mqa.json")).lm_head == 0


def test_quantized_weight_bytes_llama3():
    s = shape("llama3-8b.json")
    linear = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)  # lm_head excluded by default
    rest = 8_030_261_248 - linear
    w4 = weight_breakdown(s, parse_variant("w4g128").weights)
    assert w4.quantized_params == linear
    assert w4.metadata == linear // 128 * 4  # bf16 scale + zero per 128 params
    assert w4.total == linear // 2 + linear // 128 * 4 + 2 * rest
    rows = 32 * (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096)  # one bf16 scale per output row
    assert weight_breakdown(s, parse_variant("w8").weights).total == linear + 2 * rows + 2 * rest
    assert weight_breakdown(s, parse_variant("wf8").weights).total == linear + 2 * rows + 2 * rest
    # without the lm_head exclusion the head is quantized too
    all_in = weight_breakdown(s, WeightSpec(fmt="int", bits=4, group=128, exclude=()))
    assert all_in.quantized_params == linear + 128256 * 4096


def test_quantized_kv_bytes_and_residual():
    s = shape("llama3-8b.json")
    values = 2 * 32 * 8 * 128
    assert kv_bytes_per_token(s, kv("kv8")) == values * (1 + 4 / 32)
    assert kv_bytes_per_token(s, kv("kv4g32")) == values * (0.5 + 4 / 32)
    assert kv_bytes_per_token(s, kv("kv2g64")) == values * (0.25 + 4 / 64)
    assert kv_bytes_per_token(s, kv("kvf8e4")) == values * (1 + 2 / 32)
    # values group at most a whole head (128); per-channel keys group 256 tokens
    assert kv_bytes_per_token(s, kv("kv4g256")) == values * (0.5 + (4 / 256 + 4 / 128) / 2)
    # SmolLM2 (head dim 64), group 0: values per whole head (64), per-channel keys per residual block (128)
    small = shape("smollm2-135m.json")
    assert kv_bytes_per_token(small, kv("kv4g0r128")) == 2 * 30 * 3 * 64 * (0.5 + (4 / 128 + 4 / 64) / 2)
    assert kv_bytes_per_token(small, kv("kv4g0r128kt")) == 2 * 30 * 3 * 64 * (0.5 + 4 / 64)
    assert kv_bytes_per_token(small, kv("kvhf4")) == 2 * 30 * 3 * 64 * (0.5 + 4 / 64)
    # worst case per sequence: quantized in blocks of 128 tokens, up to 127 newest tokens still in bf16
    assert full_precision_tokens(kv("kv4g32r128"), 128) == 127
    assert full_precision_tokens(kv("kv4g32r100"), 128) == 127  # 100 rounded up to whole key groups of 32
    assert full_precision_tokens(kv("kv4g32r0kt"), 128) == 0 and full_precision_tokens(kv("kvhf4r64"), 64) == 64
    assert kv_bytes_for_context(s, kv("kv4g32r128"), 8192) == 127 * 131072 + 8065 * 40960
    assert kv_bytes_for_context(s, kv("kv4g32r128"), 100) == 100 * 131072
    for bad in ("kv4g0r0", "kv4g48"):
        with pytest.raises(EvalsuiteError):
            kv_bytes_per_token(s, kv(bad))
    mqa = shape("gemma-2b-mqa.json")
    assert kv_bytes_per_token(mqa, kv("kv4g32")) == 2 * 18 * 256 * (0.5 + 4 / 32)


def test_capacity_crossover_and_speedup_llama3():
    s = shape("llama3-8b.json")
    budget = 80 * GIB - 8 * GIB
    w4 = parse_variant("w4g128").weights
    p = make_plan(s, [WeightSpec(), w4], [None, kv("kv4g32")], 80 * GIB, parse_reserve("10%", 80 * GIB), 8192, 1)
    c = {(x.weights, x.kv): x for x in p.combos}
    base, best = c[("bf16", "bf16")], c[("w4g128", "kv4g32r128")]
    w_bf16, w_w4 = 16_060_522_496, 5_809_643_520
    assert base.weight_bytes == w_bf16 and best.weight_bytes == w_w4
    assert base.max_tokens == math.floor((budget - w_bf16) / 131072) == 467_291
    assert base.max_requests == (budget - w_bf16) // (8192 * 131072) == 57
    assert best.max_requests == math.floor((budget - w_w4) / (127 * 131072 + 8065 * 40960))
    assert base.kv_equals_weights_tokens == pytest.approx(w_bf16 / 131072)
    assert best.crossover_tokens == pytest.approx((w_bf16 - w_w4) / (131072 - 40960))  # ~113.8k tokens
    assert base.crossover_tokens is None and c[("bf16", "kv4g32r128")].crossover_tokens == 0
    assert c[("w4g128", "bf16")].crossover_tokens is None  # KV saves nothing: never
    step_base = w_bf16 + 8192 * 131072
    assert best.decode_speedup == pytest.approx(step_base / (w_w4 + 127 * 131072 + 8065 * 40960))
    assert base.decode_speedup == 1.0


def test_speedup_shifts_to_kv_with_batch_and_mha_context():
    s = shape("llama2-7b.json")
    w4 = parse_variant("w4g128").weights
    kvs = [None, kv("kv4g32")]
    small = {(c.weights, c.kv): c for c in make_plan(s, [w4], kvs, 80 * GIB, 0, 1024, 1).combos}
    big = {(c.weights, c.kv): c for c in make_plan(s, [w4], kvs, 80 * GIB, 0, 1024, 64).combos}
    # at batch 1 weights dominate (KV adds little), at batch 64 the KV cache does
    gain_small = small[("w4g128", "kv4g32r128")].decode_speedup / small[("w4g128", "bf16")].decode_speedup
    gain_big = big[("w4g128", "kv4g32r128")].decode_speedup / big[("w4g128", "bf16")].decode_speedup
    assert 1 < gain_small < gain_big
    bf16 = make_plan(s, [WeightSpec()], [None], 80 * GIB, 0, 4096, 2).combos[0]
    assert bf16.kv_equals_weights_context == pytest.approx(2 * 6_738_415_616 / (524288 * 2))


def test_weights_that_do_not_fit():
    c = make_plan(shape("llama3-8b.json"), [WeightSpec()], [None], 15 * GIB, GIB, 4096).combos[0]
    assert not c.fits and c.max_tokens == 0 and c.max_requests == 0


def test_sizes_and_reserve():
    assert parse_size("80GiB") == 80 * GIB == parse_size("80 g")
    assert parse_size("141GB") == 141 * 10**9 and parse_size("1.5e9") == 1_500_000_000
    assert parse_reserve("10%", 1000) == 100 and parse_reserve("4GiB", 80 * GIB) == 4 * GIB
    for bad in ("80XB", "", "GiB"):
        with pytest.raises(EvalsuiteError):
            parse_size(bad)
    for bad in ("100%", "x%", "90GiB"):
        with pytest.raises(EvalsuiteError):
            parse_reserve(bad, 80 * GIB)


def test_bad_configs_raise_one_line(tmp_path):
    cases = {"missing.json": None, "broken.json": '{"hidden_size": 4', "list.json": "[1, 2]",
             "partial.json": '{"hidden_size": 64}', "neg.json": json.dumps(
                 {"hidden_size": -1, "num_attention_heads": 4, "num_hidden_layers": 2,
                  "intermediate_size": 8, "vocab_size": 10})}
    for name, text in cases.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        with pytest.raises(EvalsuiteError) as err:
            shape_from_config(load_config(tmp_path / name))
        assert "\n" not in str(err.value)
    with pytest.raises(EvalsuiteError, match="mixture-of-experts"):
        shape("mixtral-8x7b-moe.json")
    with pytest.raises(EvalsuiteError, match="multiple"):
        shape_from_config({"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3,
                           "num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 10})


def test_precision_lists():
    assert [w.name for w in parse_weight_list("bf16,w8,w4g128,wf8")] == ["bf16", "w8", "w4g128", "wf8"]
    kvs = parse_kv_list("bf16,kv8,kv4g32,kvf8e4")
    assert kvs[0] is None and [k.name for k in kvs[1:]] == ["kv8g32r128", "kv4g32r128", "kvf8e4g32r128"]
    for fn, bad in ((parse_weight_list, "w4+kv4"), (parse_kv_list, "w4"), (parse_weight_list, "w8,w8"),
                    (parse_kv_list, " , ")):
        with pytest.raises(EvalsuiteError):
            fn(bad)


def test_cli_table_and_json():
    runner = CliRunner()
    cfg = str(CONFIGS / "llama3-8b.json")
    res = runner.invoke(plan, [cfg, "--weights", "bf16,w4g128", "--kv", "bf16,kv4g32", "--gpu-mem", "80GiB",
                               "--reserve", "10%", "--context", "8192", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["params"]["total"] == 8_030_261_248 and data["model"]["attention"] == "GQA"
    assert len(data["combos"]) == 4 and data["combos"][0]["max_requests"] == 57
    res = runner.invoke(plan, [cfg, "--context", "8192"])
    assert res.exit_code == 0 and "w4g128" in res.output and "kvf8e4g32r128" in res.output
    assert "GQA" in res.output and "467.3k" in res.output
    res = runner.invoke(plan, [str(CONFIGS / "nope.json")], standalone_mode=False)
    assert isinstance(res.exception, EvalsuiteError)


def test_planner_matches_runtime_formula_on_quantized_tiny_models():
    """The planner's bytes equal evalsuite.variants.memory's formula on really quantized models."""
    pytest.importorskip("optimum.quanto")
    import torch
    from tests.conftest import make_tiny_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from evalsuite.variants.memory import weight_bytes as runtime_bytes
    from evalsuite.variants.weights import quantize_weights

    untied = LlamaForCausalLM(LlamaConfig(
        vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=32, tie_word_embeddings=False, attention_bias=True)).to(torch.bfloat16)
    for model in (make_tiny_model(1000), untied):
        s = shape_from_config(model.config.to_dict())
        assert count_params(s).total == sum(p.numel() for p in model.parameters())
        for text in ("bf16", "w8", "w4g32", "w2g64", "wf8"):
            spec = parse_variant(text).weights
            got = runtime_bytes(quantize_weights(model, spec), spec)
            assert weight_breakdown(s, spec).total == got.formula, text
            assert abs(got.measured - got.formula) <= 0.01 * got.formula, text


@pytest.mark.parametrize("spec", ["kv8", "kv4g32", "kv2g64r64", "kvf8e4", "kvf8e5g16kt", "kv4g0r128", "kvhf2",
                                  "kv4g128"])
def test_kv_formula_matches_the_cache_module(spec):
    """The planner's figures from a ModelShape equal evalsuite.kvcache's from a transformers config of the same
    model (one formula, two ways to read the model's dimensions)."""
    from transformers import LlamaConfig

    from evalsuite.kvcache import kv_bytes_for_length
    from evalsuite.kvcache import kv_bytes_per_token as cache_bpt

    cfg = load_config(CONFIGS / "smollm2-135m.json")
    hf = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    s = shape_from_config(cfg)
    assert kv_bytes_per_token(s, kv(spec)) == pytest.approx(cache_bpt(kv(spec), hf))
    if kv(spec).backend == "evalsuite":  # worst case over lengths = the cache's exact bytes at its worst length
        n = 1000
        worst = max(kv_bytes_for_length(kv(spec), hf, m) - m * kv_bytes_per_token(s, kv(spec))
                    for m in range(n - 300, n))
        full, q = kv_bytes_per_token(s, None), kv_bytes_per_token(s, kv(spec))
        assert worst == pytest.approx(full_precision_tokens(kv(spec), 64) * (full - q), abs=1)


def test_activation_bits_compute_roof_and_intensity():
    s = shape("llama3-8b.json")
    specs = [WeightSpec(), parse_variant("w8").weights, parse_variant("w8a8").weights, parse_variant("wf8af8").weights]
    p = make_plan(s, specs, [None], 80 * GIB, parse_reserve("10%", 80 * GIB), 4096, 32)
    c = {x.weights: x for x in p.combos}
    assert c["w8a8"].weight_bytes == c["w8"].weight_bytes  # activations add no weight bytes
    assert (c["bf16"].compute_roof, c["w8"].compute_roof, c["w8a8"].compute_roof, c["wf8af8"].compute_roof) == \
        (1.0, 1.0, 2.0, 2.0)
    assert c["w8a8"].activation_bits == 8 and c["w8"].activation_bits == 16
    assert c["bf16"].arithmetic_intensity == pytest.approx(32.0)  # 16·B / 16 bits
    params = count_params(s).total
    assert c["w8"].arithmetic_intensity == pytest.approx(16 * 32 / (8 * c["w8"].weight_bytes / params))


def test_ablation_sweep_expands_activation_specs():
    from evalsuite.report.ablation import expand_sweep

    names = expand_sweep("w{8,4}a8") + expand_sweep("w4g{64,128}")
    assert names == ["w8a8", "w4a8", "w4g64", "w4g128"]
    assert [parse_variant(n).name for n in names] == ["w8a8", "w4g128a8", "w4g64", "w4g128"]
