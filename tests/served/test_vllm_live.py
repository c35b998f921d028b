"""Against real vLLM servers serving the embedded model (``make test-vllm``; started once per session)."""
from __future__ import annotations

from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.served.endpoint import EndpointClient, EndpointSpec
from evalsuite.served.vllm import kld as skld

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def tokenizer(base_folder: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(base_folder)


def _client(server) -> EndpointClient:
    c = EndpointClient(EndpointSpec(server.url, server.name))
    c.probe()
    return c


def test_tokenizers_pair(vllm_servers: dict, tokenizer) -> None:
    from evalsuite.served.pairing import served_mismatch

    for server in vllm_servers["servers"].values():
        assert server.alive() and server.started_s > 0
        assert served_mismatch(tokenizer, _client(server)) is None


def _answer(client: EndpointClient, prompt: str, tokenizer, n: int = 12) -> tuple[list[int], list[int]]:
    out = client.post("/completions", {"model": client.served_model, "prompt": prompt, "max_tokens": n,
                                       "temperature": 0.0})
    ans = out["choices"][0]["text"]
    return tokenizer(prompt, add_special_tokens=False)["input_ids"], tokenizer(ans, add_special_tokens=False)[
        "input_ids"]


def test_fp8_kv_kld_reads_the_quantized_cache(vllm_servers: dict, tokenizer) -> None:
    """One prefill over prompt + answer: bf16 against itself is exactly 0, fp8 KV is not (the CPU backend attends
    over the fp8 paged cache in prefill too); top-k + rest is a lower bound on the exact value."""
    base, fp8 = (_client(vllm_servers["servers"][n]) for n in ("bf16", "vkvf8"))
    p_ids, a_ids = _answer(base, "The three primary colors are", tokenizer)
    ids = p_ids + a_ids
    assert skld.method_for(len(ids), len(tokenizer))[0] == skld.FULL
    full = {name: skld.prompt_logprobs(c, ids, -1) for name, c in (("b1", base), ("b2", base), ("f", fp8))}
    assert len(full["b1"][-1]) == len(tokenizer)
    same, _, n = skld.answer_kld(full["b1"], full["b2"], a_ids, True)
    assert n == len(a_ids) and max(same) == 0.0
    exact, agree, _ = skld.answer_kld(full["b1"], full["f"], a_ids, True)
    assert sum(exact) > 0
    top_b, top_f = skld.prompt_logprobs(base, ids, skld.TOP_K), skld.prompt_logprobs(fp8, ids, skld.TOP_K)
    bound, _, _ = skld.answer_kld(top_b, top_f, a_ids, False)
    assert all(b <= e + 1e-9 for b, e in zip(bound, exact)) and sum(bound) > 0
    print(f"\nfp8 KV KLD over {n} answer tokens: exact mean {sum(exact) / n:.3g}, top-{skld.TOP_K}+rest "
          f"{sum(bound) / n:.3g}, top-1 agreement {agree}/{n}")


def test_run_gates_fp8_kv(vllm_servers: dict, tmp_path: Path) -> None:
    """A whole run on the session's servers: both sides served, KLD per row, flags and version in the meta."""
    from evalsuite.core.config import RunConfig
    from evalsuite.run.pipeline import execute
    from evalsuite.core.store import Store
    from evalsuite.served.vllm.backend import VllmBackend

    run_dir = tmp_path / "run"
    config = RunConfig(variants=["bf16", "vkvf8"], tasks=["reasoning"], limit=3, batch_size=4)
    backend = VllmBackend("default", workdir=run_dir, python=vllm_servers["python"],
                          external=vllm_servers["servers"])
    execute(config, run_dir, resume=False, backend=backend, progress=False, log=lambda _: None).close()
    assert all(s.alive() for s in vllm_servers["servers"].values())  # the session's servers are not stopped
    store = Store.open(run_dir)
    meta = store.meta()
    assert meta["settings"]["backend"] == "vllm" and meta["settings"]["vllm_version"] and meta["settings"]["device"]
    assert meta["settings"]["servers"]["vkvf8"]["flags"] == ["--kv-cache-dtype", "fp8"]
    assert "per-tensor" in meta["settings"]["servers"]["vkvf8"]["kv_scheme"]
    assert len(store.samples("bf16", "reasoning")) == 3 and len(store.samples("vkvf8", "reasoning")) == 3
    rows = store.kld("vkvf8")
    assert len(rows) == 3 and all(r.method in (skld.FULL, skld.TOPK) and r.n_tokens > 0 for r in rows)
    assert (run_dir / "served.json").exists()


def test_failed_start_is_one_line(vllm_servers: dict, base_folder: str, tmp_path: Path) -> None:
    from evalsuite.served.vllm.server import VllmServer

    server = VllmServer(vllm_servers["python"], base_folder, ("--kv-cache-dtype", "int3"), tmp_path / "bad.log",
                        name="bad")
    with pytest.raises(EvalsuiteError) as exc:
        server.start(300)
    msg = str(exc.value)
    assert "exited" in msg and "int3" in msg and "\n" not in msg and exc.value.exit_code == 2
    assert not server.alive()
