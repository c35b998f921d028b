"""Against real llama.cpp servers of the embedded GGUF (``llama_servers``: f16, q8_0 and q4_0 KV caches, started
once per session): an endpoint gate with KLD and resume, reruns, and a mixed run (in-process baseline, served
variant). Every test using those servers lives here, so pytest-xdist (``--dist loadscope``) starts them once."""
from __future__ import annotations

import math

import pytest


def _config(servers, **kw):
    from evalsuite.core.config import RunConfig

    return RunConfig(model=f"openai:{servers['f16']}#f16",
                     variants=[f"openai:{servers['q8_0']}#q8_0", f"openai:{servers['q4_0']}#q4_0"],
                     tasks=["needle", "json"], limit=3,
                     task_params={"needle": {"kinds": ["single"], "context_lens": [512], "depths": [0.2, 0.5, 0.8],
                                             "value_types": ["number"]},
                                  "json": {"n": 3, "max_new_tokens": 32}}, **kw)  # 32: KLD rows, not JSON


def execute_endpoint(config, run_dir, resume):
    """What `evalsuite run --model openai:...` does."""
    from evalsuite.cli.backends import make_backend
    from evalsuite.run.pipeline import execute

    return execute(config, run_dir, resume, make_backend(config, run_dir), progress=False, log=lambda s: None)


def test_llama_server_kv_gate(llama_servers, tmp_path):
    from evalsuite.gate.store_gate import gate_store

    store = execute_endpoint(_config(llama_servers), tmp_path / "run", resume=False)
    ids = {v: sorted((r.task, r.sample_id) for r in store.samples(v)) for v in ("f16", "q8_0", "q4_0")}
    assert ids["f16"] == ids["q8_0"] == ids["q4_0"] and len(ids["f16"]) == 6
    base = store.samples("f16")
    assert all(r.output for r in base) and sum(r.score for r in base if r.task == "needle") >= 1
    kld = store.kld("q4_0")
    assert len(kld) == 6 and all(k.n_tokens >= 1 and len(k.token_kld) == k.n_tokens for k in kld)
    assert all(math.isfinite(x) and x >= 0 for k in kld for x in k.token_kld)
    gated = gate_store(store)
    assert gated.baseline == "f16" and gated.variants == ["q8_0", "q4_0"]
    assert set(gated.gate.variant_verdicts) == {"q8_0", "q4_0"}
    assert set(gated.gate.variant_verdicts.values()) <= {"PASS", "FAIL", "INCONCLUSIVE"}
    # resume: nothing is regenerated or duplicated, and greedy outputs are stable across a second pass
    store2 = execute_endpoint(_config(llama_servers), tmp_path / "run", resume=True)
    assert len(store2.samples()) == 18 and len(store2.kld("q4_0")) == 6


def test_llama_server_reruns_same_samples(llama_servers, tmp_path):
    cfg = _config(llama_servers, kld=False)
    cfg.variants, cfg.tasks = [], ["json"]
    a = execute_endpoint(cfg, tmp_path / "a", resume=False)
    b = execute_endpoint(cfg, tmp_path / "b", resume=False)
    # llama.cpp's server is not bitwise reproducible run to run (its prompt cache reuses a previous request's
    # K/V, and threaded matmuls), so two greedy runs may differ in text: the noise floor exists for this.
    # What must hold: the same samples, prompts and server fingerprint, and a complete store each time.
    assert [(r.sample_id, r.prompt_hash) for r in a.samples()] == [(r.sample_id, r.prompt_hash) for r in b.samples()]
    assert len(a.samples()) == len(b.samples()) > 0 and all(r.n_tokens > 0 for r in b.samples())
    assert a.meta()["fingerprint"] == b.meta()["fingerprint"]


@pytest.mark.embedded
def test_mixed_run_gates_a_llama_server_variant(llama_servers, tmp_path):
    from evalsuite.cli.backends import make_backend
    from evalsuite.gate.store_gate import gate_store
    from evalsuite.core.config import RunConfig
    from evalsuite.run.pipeline import execute
    from evalsuite.backends.served.kld import METHOD

    cfg = RunConfig(model="default", variants=[f"openai:{llama_servers['f16']}#q4_1"], tasks=["reasoning"], limit=2)
    run_dir = tmp_path / "run"
    store = execute(cfg, run_dir, False, make_backend(cfg, run_dir), progress=False, log=lambda s: None)
    ids = {v: sorted(r.sample_id for r in store.samples(v)) for v in ("bf16", "q4_1")}
    assert ids["bf16"] == ids["q4_1"] and len(ids["bf16"]) == 2
    assert all(r.output for r in store.samples("q4_1"))
    # the served variant saw exactly the baseline's rendered prompt
    base = {r.sample_id: r.prompt for r in store.samples("bf16")}
    assert all(r.prompt == base[r.sample_id] for r in store.samples("q4_1"))
    kld = store.kld("q4_1")
    assert len(kld) == 2 and {k.method for k in kld} == {METHOD}
    assert all(k.n_tokens >= 1 and len(k.token_kld) == k.n_tokens and 0 <= k.top1_agree <= k.n_tokens for k in kld)
    assert all(math.isfinite(x) and x >= 0 for k in kld for x in k.token_kld)
    assert store.kld_methods() == {"q4_1": {METHOD: 2}} and "served" in store.meta()["kld_method"]
    info = {v.variant: v for v in store.variant_infos().values()}["q4_1"]
    assert info.weight_bytes == 0 and info.fingerprint.startswith("endpoint:")
    gated = gate_store(store)
    assert gated.variants == ["q4_1"] and gated.gate.variant_verdicts["q4_1"] in {"PASS", "FAIL", "INCONCLUSIVE"}
