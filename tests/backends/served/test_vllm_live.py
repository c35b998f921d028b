"""Against real vLLM servers serving the embedded model (``make test-vllm``; started once per session)."""
from __future__ import annotations

from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.backends.served.endpoint import EndpointClient, EndpointSpec
from evalsuite.backends.served.vllm import kld as skld

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
    from evalsuite.backends.served.pairing import served_mismatch

    for server in vllm_servers["servers"].values():
        assert server.alive() and server.started_s > 0
        assert served_mismatch(tokenizer, _client(server)) is None


def _answer(client: EndpointClient, prompt: str, tokenizer, n: int = 4) -> tuple[list[int], list[int]]:
    """(prompt ids, the first ``n`` greedy answer ids): each position of prompt + answer costs a full-vocabulary
    log-prob row (49,152 numbers of JSON) in every request below; four answer positions already show fp8's KLD."""
    out = client.post("/completions", {"model": client.served_model, "prompt": prompt, "max_tokens": n,
                                       "temperature": 0.0})
    ans = out["choices"][0]["text"]
    return tokenizer(prompt, add_special_tokens=False)["input_ids"], tokenizer(ans, add_special_tokens=False)[
        "input_ids"]


def test_fp8_kv_kld_reads_the_quantized_cache(vllm_servers: dict, tokenizer) -> None:
    """One prefill over prompt + answer: bf16 against itself is exactly 0, fp8 KV is not (the CPU backend attends
    over the fp8 paged cache in prefill too); top-k + rest is a lower bound on the exact value."""
    if vllm_servers["variant"] != "vkvf8":
        pytest.skip("vLLM's CPU backend runs an FP8 KV cache only with AVX-512 or AMX; this CPU has neither")
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
    """A whole run on the session's servers: both sides served, KLD per row, flags and version in the meta (the
    variant is fp8 KV where this machine's vLLM runs it, else the baseline in eager mode)."""
    from evalsuite.core.config import RunConfig
    from evalsuite.run.pipeline import execute
    from evalsuite.store.sqlite import Store
    from evalsuite.backends.served.vllm.backend import VllmBackend

    run_dir, name = tmp_path / "run", vllm_servers["variant"]
    config = RunConfig(variants=["bf16", vllm_servers["specs"][name].spec], tasks=["reasoning"], limit=3,
                       batch_size=4)
    backend = VllmBackend("default", workdir=run_dir, python=vllm_servers["python"],
                          external=vllm_servers["servers"])
    execute(config, run_dir, resume=False, backend=backend, progress=False, log=lambda _: None).close()
    assert all(s.alive() for s in vllm_servers["servers"].values())  # the session's servers are not stopped
    store = Store.open(run_dir)
    meta = store.meta()
    assert meta["settings"]["backend"] == "vllm" and meta["settings"]["vllm_version"] and meta["settings"]["device"]
    # what the baseline's engine logged at start-up (its sizing here gives no --max-model-len: only the log can)
    assert meta["settings"]["compute_dtype"] == "bfloat16" and isinstance(meta["settings"]["max_model_len"], int)
    assert meta["settings"]["kv_cache_dtype"] == "auto" and meta["settings"]["vllm_libraries"]["torch"]
    assert meta["settings"]["servers"][name]["flags"] == list(vllm_servers["specs"][name].flags)
    if name == "vkvf8":
        assert meta["settings"]["servers"][name]["flags"] == ["--kv-cache-dtype", "fp8"]
        assert "per-tensor" in meta["settings"]["servers"][name]["kv_scheme"]
    assert len(store.samples("bf16", "reasoning")) == 3 and len(store.samples(name, "reasoning")) == 3
    rows = store.kld(name)
    assert len(rows) == 3 and all(r.method in (skld.FULL, skld.TOPK) and r.n_tokens > 0 for r in rows)
    assert (run_dir / "served.json").exists()


def test_failed_start_is_one_line(vllm_servers: dict, base_folder: str, tmp_path: Path) -> None:
    from evalsuite.backends.served.vllm.server import VllmServer

    server = VllmServer(vllm_servers["python"], base_folder, ("--kv-cache-dtype", "int3"), tmp_path / "bad.log",
                        name="bad")
    with pytest.raises(EvalsuiteError) as exc:
        server.start(300)
    msg = str(exc.value)
    assert "exited" in msg and "int3" in msg and "\n" not in msg and exc.value.exit_code == 2
    assert not server.alive()


def test_server_dying_mid_run_leaves_a_resumable_run(vllm_servers: dict, tmp_path: Path) -> None:
    """The variant's server is killed (SIGKILL) after its first answers are stored: the run stops with one line
    (exit 2), every stored row is intact, and ``--resume`` on a fresh server completes it. Kills the session's
    variant server and puts a fresh one in its place (so keep this test last in the file)."""
    import os
    import signal

    from evalsuite.core.config import RunConfig
    from evalsuite.store.sqlite import Store
    from evalsuite.run.pipeline import execute
    from evalsuite.backends.served.vllm.backend import VllmBackend
    from evalsuite.backends.served.vllm.server import VllmServer
    from tests.backends.served.conftest import STARTUP_S, TEST_SIZING

    servers, victim = vllm_servers["servers"], vllm_servers["variant"]
    killed: list[int] = []

    class DyingServer(VllmBackend):
        def generate(self, variant, name, task, indices, batch_size):
            for rows in super().generate(variant, name, task, indices, batch_size):
                yield rows  # the Runner stores these before asking for more
                if name == victim and not killed:
                    proc = servers[victim].proc
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(30)
                    killed.append(proc.pid)

    run_dir = tmp_path / "run"
    config = RunConfig(variants=["bf16", vllm_servers["specs"][victim].spec], tasks=["reasoning"], limit=6,
                       batch_size=2)
    backend = DyingServer("default", workdir=run_dir, python=vllm_servers["python"], external=servers)
    with pytest.raises(EvalsuiteError) as exc:
        execute(config, run_dir, resume=False, backend=backend, progress=False, log=lambda _: None)
    msg = str(exc.value)
    assert killed and exc.value.exit_code == 2 and "\n" not in msg and servers["bf16"].alive(), msg
    print(f"\nafter the kill: {msg}")
    store = Store.open(run_dir)
    base_rows = {r.sample_id: r for r in store.samples("bf16", "reasoning")}
    kept = {r.sample_id: r for r in store.samples(victim, "reasoning")}
    store.close()
    assert len(base_rows) == 6 and 1 <= len(kept) < 6, (len(base_rows), len(kept))

    spec = vllm_servers["specs"][victim]
    servers[victim] = VllmServer(vllm_servers["python"], spec.model, spec.flags,
                                 vllm_servers["logs"] / f"{victim}-restarted.log", name=victim,
                                 sizing=TEST_SIZING).start(STARTUP_S)
    backend = VllmBackend("default", workdir=run_dir, python=vllm_servers["python"], external=servers)
    execute(config, run_dir, resume=True, backend=backend, progress=False, log=lambda _: None).close()
    store = Store.open(run_dir)
    after = {r.sample_id: r for r in store.samples(victim, "reasoning")}
    assert len(after) == 6 and all(after[i] == kept[i] for i in kept)  # stored rows kept as they were
    assert {r.sample_id: r for r in store.samples("bf16", "reasoning")} == base_rows
    assert len(store.kld(victim)) == 6
