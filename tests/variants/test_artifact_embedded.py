"""GGUF artifacts made from the embedded model with llama.cpp's quantizer, gated in-process against the baseline."""
import pytest


def _quantize(src, dst, ftype_name: str) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype_name}")
    params.allow_requantize = True  # the embedded file is already Q4_1
    assert llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params) == 0


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    """Q8_0 and Q2_K files (at width 576 llama.cpp falls back from Q2_K to Q4_0 / Q3_K: the closest it accepts)."""
    pytest.importorskip("llama_cpp")
    from evalsuite.models.embedded import embedded_gguf

    out = tmp_path_factory.mktemp("ggufs")
    files = {}
    for name in ("Q8_0", "Q2_K"):
        files[name] = out / f"smol-{name.lower()}.gguf"
        _quantize(embedded_gguf(), files[name], name)
    return files


@pytest.mark.embedded
def test_gguf_artifacts_gate_and_kld_orders_as_bits(embedded, ggufs, tmp_path, monkeypatch):
    from evalsuite.run.prepare import PreparedTask, spread_limit
    from evalsuite.tasks.registry import default_registry
    from evalsuite.variants.artifact import artifact_fingerprint, gguf_bytes
    from tests.conftest import run_model

    monkeypatch.setenv("EVALSUITE_CACHE", str(tmp_path / "cache"))  # the artifacts' conversions stay in tmp
    task = default_registry().get("reasoning")
    params = task.params({"max_new_tokens": 16})
    tasks = [PreparedTask(task, params, task.gen_settings(params), spread_limit(task.samples(params, 1), 3), 1)]
    q8, q2 = ggufs["Q8_0"], ggufs["Q2_K"]
    store = run_model(embedded, tmp_path / "run", variants=("bf16", f"ckpt:{q8}", f"ckpt:{q2}#q2k"), tasks=tasks)
    infos = store.variant_infos()
    assert infos["smol-q8_0"].weight_bytes == gguf_bytes(q8).total and gguf_bytes(q8).types["Q8_0"] == 211
    assert infos["bf16"].weight_bytes > infos["smol-q8_0"].weight_bytes > infos["q2k"].weight_bytes
    assert infos["q2k"].fingerprint == artifact_fingerprint(str(q2)) != infos["smol-q8_0"].fingerprint
    tokens = {v: [x for k in store.kld(v) for x in k.token_kld] for v in ("smol-q8_0", "q2k")}
    mean = {v: sum(t) / len(t) for v, t in tokens.items()}
    print("weight bytes", {v: i.weight_bytes for v, i in infos.items()}, "mean KLD", mean)
    assert len(tokens["q2k"]) >= 3 * 4 and mean["q2k"] > mean["smol-q8_0"]
