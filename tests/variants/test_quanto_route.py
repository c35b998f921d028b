"""Weight specs that would reach optimum-quanto's ``quanto_cuda`` extension (JIT-built with nvcc and ninja) on a GPU:
under ``--weight-kernels dequantized`` they are frozen and unpacked on the CPU; under ``--weight-kernels quanto``
and for weight + activation specs they are refused in one line before the model loads. Checked on the CPU with the
GPU mocked (compute capability 9.0, CUDA 13.0: an H100 under torch cu130); tests/models/test_device_cuda.py runs
the same paths on a real GPU."""
from __future__ import annotations

from importlib.metadata import version

import pytest
import torch
from click.testing import CliRunner

from evalsuite.errors import EvalsuiteError
from evalsuite.variants import quanto_route
from evalsuite.variants.quanto_route import Gpu, extension_route, rule_routes
from evalsuite.variants.spec import parse_variant

H100 = Gpu((9, 0), "13.0")
#: SmolLM2-135M's Linear layers (one decoder layer): 576 wide, MLP 1536, 3 KV heads of 64
SMOL = {"model.layers.0.self_attn.q_proj": (576, 576), "model.layers.0.self_attn.k_proj": (192, 576),
        "model.layers.0.self_attn.v_proj": (192, 576), "model.layers.0.self_attn.o_proj": (576, 576),
        "model.layers.0.mlp.gate_proj": (1536, 576), "model.layers.0.mlp.up_proj": (1536, 576),
        "model.layers.0.mlp.down_proj": (576, 1536), "lm_head": (49152, 576)}
#: a 7B's (Qwen2.5-7B: hidden 3584, MLP 18944, 4 KV heads of 128)
QWEN7B = {"model.layers.0.self_attn.q_proj": (3584, 3584), "model.layers.0.self_attn.k_proj": (512, 3584),
          "model.layers.0.mlp.down_proj": (3584, 18944), "model.layers.0.mlp.up_proj": (18944, 3584)}


def test_the_routing_is_read_for_the_quanto_it_was_read_from():
    """The table below is optimum-quanto 0.2.x's dispatch (WeightQBitsTensor.create, WeightQBytesTensor.create,
    PackedTensor.unpack); another minor version must be read again."""
    assert version("optimum-quanto").startswith("0.2.")


@pytest.mark.parametrize("spec,linears,dtype,gpu,want", [
    ("w4g64", SMOL, "bfloat16", H100, {n: "int4 group 64 in bfloat16 (unpack)" for n in SMOL if n != "lm_head"}),
    ("w2g32", QWEN7B, "bfloat16", H100, {n: "int2 group 32 in bfloat16 (unpack)" for n in QWEN7B}),
    ("w4g128", QWEN7B, "bfloat16", H100, {}),  # TinyGemm: every width divides 128
    ("w4g128", QWEN7B, "bfloat16", Gpu((7, 5), "13.0"), {n: "int4 group 128 in bfloat16 (unpack)" for n in QWEN7B}),
    ("w4g128", QWEN7B, "bfloat16", Gpu((9, 0), "12.0"), {n: "int4 group 128 in bfloat16 (unpack)" for n in QWEN7B}),
    ("w4g128", QWEN7B, "float16", H100, {n: "int4 group 128 in float16 (AWQ)" for n in QWEN7B}),
    ("w4g128", QWEN7B, "float32", H100, {n: "int4 group 128 in float32 (unpack)" for n in QWEN7B}),
    ("w8", SMOL, "bfloat16", H100, {}),
    ("w8a8", SMOL, "bfloat16", H100, {}),
    ("wf8af8", QWEN7B, "bfloat16", H100, {}),
    ("wf8", QWEN7B, "float32", H100, {}),
])
def test_which_layers_need_the_extension(spec, linears, dtype, gpu, want):
    assert rule_routes(parse_variant(spec).weights, linears, dtype, gpu) == want


def test_w4g128_on_a_576_wide_model_falls_back_to_group_96_and_needs_the_extension():
    routes = rule_routes(parse_variant("w4g128").weights, SMOL, "bfloat16", H100)
    assert set(routes) == {n for n, (_, width) in SMOL.items() if width == 576 and n != "lm_head"}
    assert set(routes.values()) == {"int4 group 96 in bfloat16 (unpack)"}  # down_proj (1536 wide) keeps 128


def test_float8_weights_take_marlin_where_its_tiles_fit():
    assert extension_route("f8", None, False, 1536, 576, "bfloat16", H100) == "float8 (Marlin FP8)"
    assert extension_route("f8", None, False, 576, 576, "bfloat16", H100) == ""  # 576 is no multiple of 128
    assert extension_route("f8", None, True, 1536, 576, "bfloat16", H100) == ""  # activations quantized too
    assert extension_route("f8", None, False, 1536, 576, "bfloat16", Gpu((7, 5), "13.0")) == ""


def test_mixed_precision_routes_each_layer_at_its_own_rule():
    spec = parse_variant("w4g128[w4g64=*.down_proj;keep=*.k_proj]").weights
    assert rule_routes(spec, QWEN7B, "bfloat16", H100) == {"model.layers.0.mlp.down_proj":
                                                           "int4 group 64 in bfloat16 (unpack)"}


@pytest.fixture
def on_h100(monkeypatch):
    """Every device the routing asks about reads as an H100 (the CPU tensors stand in for its)."""
    monkeypatch.setattr(quanto_route, "cuda_gpu", lambda device: H100)


def test_dequantized_kernels_freeze_the_layers_that_need_it_on_the_cpu(tiny, on_h100, monkeypatch):
    import evalsuite.variants.weights as weights
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import VariantSpec

    moved, real = [], weights.freeze_routed

    def spy(model, spec, kernels="quanto"):
        moved.append(real(model, spec, kernels))
        return moved[-1]

    monkeypatch.setattr(weights, "freeze_routed", spy)
    w4g64 = build_variant(tiny, VariantSpec(weights=parse_variant("w4g64").weights), kernels="dequantized")
    build_variant(tiny, VariantSpec(weights=parse_variant("w4g128").weights), kernels="dequantized")
    assert moved == [14, 0]  # 7 Linear layers x 2 decoder layers; w4g128 is TinyGemm on every layer (128 / 256 wide)
    assert w4g64.kernels == "dequantized" and {p.device.type for p in w4g64.model.parameters()} == {"cpu"}
    # the values are quanto's own: the same as a build where nothing is moved
    monkeypatch.setattr(quanto_route, "cuda_gpu", lambda device: None)
    plain = weights.quantize_weights(tiny.model, parse_variant("w4g64").weights)
    got = w4g64.model.model.layers[0].mlp.down_proj.weight
    assert torch.equal(got, plain.model.layers[0].mlp.down_proj.qweight.dequantize())


@pytest.mark.parametrize("spec,kernels", [("w4g64", "quanto"), ("w2g32", "quanto"), ("w4g64a8", "dequantized")])
def test_what_needs_the_extension_and_runs_as_quanto_modules_is_refused_at_build(tiny, on_h100, spec, kernels):
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import VariantSpec

    with pytest.raises(EvalsuiteError) as err:
        build_variant(tiny, VariantSpec(weights=parse_variant(spec).weights), kernels=kernels)
    msg = str(err.value)
    assert "\n" not in msg and f"variant {spec} " in msg and "quanto_cuda" in msg and "14 of its layers" in msg


@pytest.fixture
def cuda_mocked(monkeypatch):
    """torch reports one H100 under CUDA 13.0; loading a model fails the test (refusals come before it)."""
    import evalsuite.models.loader as loader

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.version, "cuda", "13.0")

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(loader, "load_model", no_load)


@pytest.fixture
def tiny_folder(tiny, tmp_path):
    folder = tmp_path / "tiny-model"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    return folder


def _run(folder, out, variants, *extra):
    from evalsuite.cli.run_cmd import run

    return CliRunner().invoke(run, ["--model", str(folder), "--device", "cuda", "--tasks", "json", "--limit", "2",
                                    "--variants", variants, "--no-gate", "--quiet", "--out", str(out), *extra],
                              standalone_mode=False)


@pytest.mark.parametrize("variants,kernels", [("w4g64", "quanto"), ("kv4g32,w4g64a8", "dequantized")])
def test_the_cli_refuses_a_spec_that_needs_a_build_before_the_model_loads(tiny_folder, tmp_path, cuda_mocked,
                                                                          variants, kernels, monkeypatch):
    monkeypatch.setenv("EVALSUITE_BASELINES", str(tmp_path / "no-baselines"))
    res = _run(tiny_folder, tmp_path / "runs", variants, "--weight-kernels", kernels)
    assert isinstance(res.exception, EvalsuiteError), res.exception
    msg = str(res.exception)
    assert "\n" not in msg and "quanto_cuda" in msg and "nvcc" in msg and "TinyGemm" in msg  # says what runs
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("variants,kernels", [("w4g64,w2g32,wf8", "dequantized"), ("w4g128,w8,kv4g32", "quanto")])
def test_the_cli_lets_through_what_runs_without_a_build(tiny_folder, tmp_path, cuda_mocked, variants, kernels,
                                                        monkeypatch):
    monkeypatch.setenv("EVALSUITE_BASELINES", str(tmp_path / "no-baselines"))
    res = _run(tiny_folder, tmp_path / "runs", variants, "--weight-kernels", kernels)
    assert isinstance(res.exception, AssertionError) and "loaded" in str(res.exception)  # got as far as loading
