"""The CUDA paths end to end on a tiny model: generation, a quantized KV cache, KLD, a w8 weight variant and the
sensitivity passes all run on the GPU and their outputs land. Skipped where CUDA is absent (no GPU was available
where this was written: these have not been run)."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture
def tiny_cuda(tokenizer):
    from evalsuite.models import wrap_model
    from tests.conftest import make_tiny_model

    return wrap_model(make_tiny_model(len(tokenizer)).to("cuda"), tokenizer, name="tiny")


def test_loaded_on_cuda_records_it_and_auto_dtype_is_bf16(tiny_cuda, tmp_path):
    from evalsuite.models.loader import load_model

    tiny_cuda.model.save_pretrained(tmp_path)
    tiny_cuda.tokenizer.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path), "auto", "cuda")
    assert loaded.model.device.type == "cuda" and loaded.meta["device"] == "cuda:0"
    assert loaded.dtype == "bfloat16" and "CUDA" in loaded.meta["dtype_choice"]
    assert loaded.fingerprint == tiny_cuda.fingerprint


def test_run_with_kv_cache_kld_and_w8_on_cuda(tiny_cuda, tmp_path):
    from evalsuite.backends.inprocess.inprocess import InProcessBackend
    from evalsuite.variants.spec import parse_variant
    from tests.conftest import prepared, run_model

    backend = InProcessBackend.of(tiny_cuda)
    store = run_model(tiny_cuda, tmp_path / "r", ("bf16", "kv4g32", "w8"), tasks=prepared(n=4), backend=backend)
    assert backend.settings()["device"] == "cuda:0"
    names = store.variants_present()
    assert len(names) == 3
    for name in names:
        assert len(store.samples(name)) == 4
    for name in names[1:]:
        kld = store.kld(name)
        assert len(kld) == 4 and all(k.n_tokens > 0 and min(k.token_kld) >= 0 for k in kld)
    w8 = backend.built(parse_variant("w8"))
    assert all(p.device.type == "cuda" for p in w8.model.parameters())
    assert store.variant_infos()[names[2]].weight_bytes < store.variant_infos()[names[0]].weight_bytes


def test_quantized_cache_holds_cuda_tensors(tiny_cuda):
    from evalsuite.backends.inprocess.generate import generate_batch
    from evalsuite.tasks.base import GenSettings
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import parse_variant

    built = build_variant(tiny_cuda, parse_variant("kv4g32"))
    caches = []

    def make_cache():
        caches.append(built.make_cache())
        return caches[-1]

    gens = generate_batch(built.model, built.tokenizer, [("hello there", True), ("count to ten", True)],
                          GenSettings(max_new_tokens=8), make_cache)
    assert len(gens) == 2 and all(g.ttft_s is not None for g in gens)
    assert caches and all(layer.device.type == "cuda" for layer in caches[0].layers)
    held = [t for layer in caches[0].layers for v in vars(layer).values()
            for t in ([v] if isinstance(v, torch.Tensor) else vars(v).values() if hasattr(v, "__dict__") else [])
            if isinstance(t, torch.Tensor)]
    assert held and all(t.device.type == "cuda" for t in held)


def test_sampled_generation_on_cuda_is_seeded(tiny_cuda):
    """Sampling draws on the CPU (per-row CPU generators): the same seeds give the same answers on CUDA."""
    from evalsuite.backends.inprocess.generate import generate_batch
    from evalsuite.tasks.base import GenSettings

    gen = GenSettings(max_new_tokens=6, temperature=1.0)
    prompts = [("hello there", True), ("count to ten", True)]
    a = generate_batch(tiny_cuda.model, tiny_cuda.tokenizer, prompts, gen)
    b = generate_batch(tiny_cuda.model, tiny_cuda.tokenizer, prompts, gen)
    assert [g.text for g in a] == [g.text for g in b]


def test_sensitivity_passes_run_on_cuda(tiny_cuda):
    from evalsuite.kvcache import KVConfig
    from evalsuite.sensitivity.forward import Batch
    from evalsuite.sensitivity.measure import Measurer

    tok = tiny_cuda.tokenizer
    prompts = [tok("a b c d e f")["input_ids"], tok("one two three")["input_ids"]]
    answers = [tok(x, add_special_tokens=False)["input_ids"] for x in (" g h i", " four")]
    measurer = Measurer(tiny_cuda.model, [Batch(prompts, answers, tok.pad_token_id)])

    m = measurer.kv(KVConfig(bits=4))
    assert m.tokens == sum(len(a) for a in answers) and m.kld >= 0


def _quanto_cuda_built() -> bool:
    """Whether optimum-quanto's CUDA extension (JIT-built with nvcc and ninja on first use) has been loaded."""
    from optimum.quanto.library.extensions import get_extension, is_extension_available

    assert is_extension_available("quanto_cuda")  # registered on a CUDA machine: the routes below could reach it
    return get_extension("quanto_cuda")._lib is not None


def test_w4g64_dequantized_runs_on_cuda_without_building_quanto_cuda(tiny_cuda, tiny):
    """The default demo variant: its layers are frozen and unpacked on the CPU (variants.quanto_route), then held on
    the GPU; the same values as a CPU build, and no extension build."""
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import parse_variant

    built = build_variant(tiny_cuda, parse_variant("w4g64"), kernels="dequantized")
    assert {p.device.type for p in built.model.parameters()} == {"cuda"}
    with torch.no_grad():
        built.model(input_ids=torch.tensor([[1, 2, 3, 4]], device="cuda"))
    on_cpu = build_variant(tiny, parse_variant("w4g64"), kernels="dequantized")
    got, want = built.model.model.layers[0].mlp.up_proj.weight, on_cpu.model.model.layers[0].mlp.up_proj.weight
    assert torch.equal(got.cpu(), want)
    assert not _quanto_cuda_built()


def test_quanto_kernels_refuse_w4g64_on_cuda_and_run_w4g128_on_tinygemm(tiny_cuda):
    from evalsuite.backends.inprocess.inprocess import InProcessBackend
    from evalsuite.errors import EvalsuiteError
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import parse_variant

    with pytest.raises(EvalsuiteError, match="quanto_cuda"):
        InProcessBackend.of(tiny_cuda, kernels="quanto").variants(["w4g64"])
    built = build_variant(tiny_cuda, parse_variant("w4g128"), kernels="quanto")
    with torch.no_grad():
        built.model(input_ids=torch.tensor([[1, 2, 3, 4]], device="cuda"))
    assert type(built.model.model.layers[0].mlp.up_proj.weight).__name__ == "TinyGemmWeightQBitsTensor"
    assert not _quanto_cuda_built()


def test_a_stored_baselines_spilled_prompt_kv_reads_back_onto_the_gpu(tiny_cuda, tmp_path):
    """A KV variant against a stored baseline takes the baseline's prompt K/V from disk: on the GPU, where its cache
    and forward are (read back onto the CPU, the first spilled prompt mixed devices)."""
    from evalsuite.core.config import RunConfig
    from evalsuite.backends.inprocess.inprocess import InProcessBackend
    from evalsuite.backends.inprocess.spill import PromptDisk
    from evalsuite.run.pipeline import execute
    from evalsuite.tasks.registry import Registry
    from tests.toytask import CopyTask

    reg = Registry()
    reg.register("copy", CopyTask)
    root = tmp_path / "baselines"

    def go(run, variants):
        config = RunConfig(model="tiny", variants=variants, tasks=["copy"], batch_size=4)
        return execute(config, tmp_path / run, False, InProcessBackend.of(tiny_cuda, seed=config.seed),
                       progress=False, log=lambda s: None, registry=reg, baselines=root, grow_baseline=True)

    go("cold", ["bf16"])
    (kv,) = (root / p.name / "prompt_kv" for p in root.iterdir() if p.is_dir())
    (folder,) = kv.iterdir()
    from safetensors.torch import load_file

    (first, *_) = folder.glob("*.safetensors")
    kv, last = PromptDisk(folder, writable=False, device="cuda:0").get(tuple(load_file(first)["ids"].tolist()))
    assert kv[0][0].device.type == "cuda" and last.device.type == "cuda"
    warm = go("warm", ["bf16", "kv4g32"])
    name = next(k.variant for k in warm.kld())
    assert len(warm.samples(name)) == 6 and all(k.n_tokens > 0 for k in warm.kld() if k.variant == name)
