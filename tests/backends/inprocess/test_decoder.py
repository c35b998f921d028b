"""The batched decoder: shared prefix, per-row stops, finished rows dropped, exact transfer into KV caches."""
from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import Cache

from evalsuite.kvcache import KVConfig, make_cache
from evalsuite.backends.inprocess.decoder import common_prefix_len, encode_prefix, exact_prefill, prefill
from evalsuite.backends.inprocess.generate import generate_batch, iter_generate
from evalsuite.backends.inprocess.refill import Pool, can_refill
from evalsuite.tasks.base import GenSettings
from tests.conftest import make_tiny_model

HEAD = "You are a careful assistant. Read the question and answer it in a few words only, please. "
QUESTIONS = ["What is red?", "Name a large animal that lives in the sea", "Why?", "Capital of France is which city",
             "Count to three", "Spell cat"]


@pytest.fixture
def fp32(tokenizer):
    return make_tiny_model(len(tokenizer), seed=3, dtype=torch.float32)


def _prompts(questions=QUESTIONS):
    return [(HEAD + q, True) for q in questions]


def _hf_greedy(model, tokenizer, text, n, cache=None):
    """Reference: transformers' generate on one prompt (no padding), cut at EOS."""
    enc = tokenizer(text, return_tensors="pt")
    kw = {"cache": cache} if cache is not None else {}
    out = model.generate(**enc, max_new_tokens=n, do_sample=False, pad_token_id=tokenizer.pad_token_id, **kw)
    ids = out[0, enc.input_ids.shape[1]:].tolist()
    stop = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    return ids[: next((k for k, t in enumerate(ids) if t in stop), len(ids))]


def _run(model, tokenizer, prompts, gen, make=None, max_batch=8, **kw):
    got = {}
    for idx, gens in iter_generate(model, tokenizer, prompts, gen, make, max_batch=max_batch, **kw):
        got.update(zip(idx, gens))
    return [got[i] for i in range(len(prompts))]


def test_common_prefix_len():
    assert common_prefix_len([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [1, 2, 3, 4, 5, 6, 7, 8, 9, 11]], min_len=4) == 9
    assert common_prefix_len([[1, 2, 3], [1, 2, 3]], min_len=1) == 2  # each prompt keeps an own token
    assert common_prefix_len([[1, 2, 3, 4], [1, 2, 3, 4, 5]], min_len=1) == 3
    assert common_prefix_len([[1, 2, 3, 4], [1, 2, 9, 9]], min_len=3) == 0  # too short to be worth it
    assert common_prefix_len([[1, 2, 3, 4]], min_len=1) == 0


def test_shared_prefix_batch_matches_hf_generate_row_by_row(fp32, tokenizer):
    ids = [tokenizer(p)["input_ids"] for p, _ in _prompts()]
    assert common_prefix_len(ids) >= 15  # the prefix path is really taken
    gens = _run(fp32, tokenizer, _prompts(), GenSettings(max_new_tokens=10))
    for (text, _), g in zip(_prompts(), gens):
        ref = _hf_greedy(fp32, tokenizer, text, 10)
        assert g.text == tokenizer.decode(ref, skip_special_tokens=True).rstrip()
        assert g.n_tokens == len(ref)
        assert g.ttft_s is not None and g.ttft_s > 0


@pytest.mark.parametrize("cfg", [None, KVConfig(bits=4, group=8, residual=8),
                                 KVConfig(backend="hf", bits=4, group=16, residual=8)],
                         ids=["dynamic", "kv4", "quanto4"])
def test_finished_rows_leave_the_batch_and_others_are_unchanged(fp32, tokenizer, monkeypatch, cfg):
    make = None if cfg is None else (lambda: make_cache(cfg, fp32.config))
    free = _run(fp32, tokenizer, _prompts(), GenSettings(max_new_tokens=12), make, refill=False)
    stop = free[0].text[free[0].text.index(next(c for c in free[0].text[2:] if c.strip())):][:2]
    selects = []
    monkeypatch.setattr(Cache, "reorder_cache",
                        lambda self, idx, orig=Cache.reorder_cache: (selects.append(len(idx)), orig(self, idx)))
    stopped = _run(fp32, tokenizer, _prompts(), GenSettings(max_new_tokens=12, stop=(stop,)), make, refill=False)
    assert stopped[0].n_tokens < free[0].n_tokens and stop not in stopped[0].text
    assert selects and min(selects) < len(QUESTIONS)  # the batch shrank
    for f, s in zip(free, stopped):
        assert s.text == f.text.split(stop)[0].rstrip()


@pytest.mark.parametrize("cfg", [KVConfig(bits=4, group=8, residual=8), KVConfig(bits=2, group=8, residual=8),
                                 KVConfig(backend="hf", bits=4, group=16, residual=8)],
                         ids=["kv4-exact", "kv2-exact", "quanto4"])
def test_exact_prefill_transfer_equals_the_caches_own_prefill(fp32, tokenizer, cfg):
    """An exact-prefill cache filled from a DynamicCache prefill decodes exactly as after its own prefill."""
    assert exact_prefill(make_cache(cfg, fp32.config))
    prompts = _prompts(QUESTIONS[:1])
    (g,) = _run(fp32, tokenizer, prompts, GenSettings(max_new_tokens=20), lambda: make_cache(cfg, fp32.config),
                prefix_len=0)
    ref = _hf_greedy(fp32, tokenizer, prompts[0][0], 20, make_cache(cfg, fp32.config))
    assert g.text == tokenizer.decode(ref, skip_special_tokens=True).rstrip()


def test_quantized_prefill_runs_the_prompt_through_the_cache(fp32, tokenizer):
    cfg = KVConfig(bits=2, group=8, residual=8, prefill="quantized")
    assert not exact_prefill(make_cache(cfg, fp32.config))
    prompts = _prompts(QUESTIONS[:1])
    (g,) = _run(fp32, tokenizer, prompts, GenSettings(max_new_tokens=12), lambda: make_cache(cfg, fp32.config))
    ref = _hf_greedy(fp32, tokenizer, prompts[0][0], 12, make_cache(cfg, fp32.config))
    assert g.text == tokenizer.decode(ref, skip_special_tokens=True).rstrip()
    rows = [tokenizer(prompts[0][0])["input_ids"]]
    _, quantized, _ = prefill(fp32, rows, None, make_cache(cfg, fp32.config), tokenizer.pad_token_id)
    _, exact, _ = prefill(fp32, rows, None, None, tokenizer.pad_token_id)
    assert not torch.allclose(quantized, exact, atol=1e-3)  # the prompt's own attention read 2-bit K/V


def test_sampling_is_seeded(fp32, tokenizer):
    gen = GenSettings(max_new_tokens=10, temperature=1.0)
    a = [g.text for g in _run(fp32, tokenizer, _prompts(), gen, seed=1)]
    b = [g.text for g in _run(fp32, tokenizer, _prompts(), gen, seed=1)]
    c = [g.text for g in _run(fp32, tokenizer, _prompts(), gen, seed=2)]
    assert a == b and a != c


def test_prompt_without_the_prefix_is_refused(fp32, tokenizer):
    prefix = encode_prefix(fp32, tokenizer(HEAD)["input_ids"][:8])
    with pytest.raises(ValueError, match="shared prefix"):
        generate_batch(fp32, tokenizer, [("Something else entirely", True)], GenSettings(max_new_tokens=2),
                       prefix=prefix)


MORE = QUESTIONS + ["Which is the largest planet we know of in the solar system", "Say hi", "Two plus two",
                    "Name three colours of the rainbow, in order", "What do cows drink?", "Is ice cold or hot?"]


@pytest.mark.parametrize("stop", [("e",), ("o", "a")], ids=["stop-e", "stop-oa"])
def test_refill_equals_per_batch_decoding_row_by_row(fp32, tokenizer, monkeypatch, stop):
    """A pool of 4 whose finished rows' slots take the next prompts decodes each row as its own batch did."""
    merges = []
    monkeypatch.setattr(Pool, "merge", lambda self, rows, *a, orig=Pool.merge: (merges.append(len(self)),
                                                                                orig(self, rows, *a)))
    gen = GenSettings(max_new_tokens=14, stop=stop)
    per_batch = _run(fp32, tokenizer, _prompts(MORE), gen, max_batch=4, refill=False)
    assert not merges
    refilled = _run(fp32, tokenizer, _prompts(MORE), gen, max_batch=4, refill=True)
    assert any(m > 0 for m in merges)  # newcomers were merged into a running batch
    assert len({g.n_tokens for g in per_batch}) > 1  # rows really finish at different steps
    for a, b in zip(per_batch, refilled):
        assert (a.text, a.n_tokens) == (b.text, b.n_tokens)


def test_refill_within_a_token_budget_equals_per_batch(fp32, tokenizer):
    gen = GenSettings(max_new_tokens=10, stop=("e",))
    per_batch = _run(fp32, tokenizer, _prompts(MORE), gen, max_batch=4, refill=False)
    tight = _run(fp32, tokenizer, _prompts(MORE), gen, max_batch=8, refill=True, max_tokens=90)
    assert [(g.text, g.n_tokens) for g in per_batch] == [(g.text, g.n_tokens) for g in tight]


def test_refill_sampled_rows_do_not_depend_on_the_pool(fp32, tokenizer):
    gen = GenSettings(max_new_tokens=10, temperature=1.0)
    seeds = [100 + 7 * r for r in range(len(MORE))]
    runs = [[g.text for g in _run(fp32, tokenizer, _prompts(MORE), gen, max_batch=b, row_seeds=seeds, refill=r)]
            for b, r in [(3, True), (12, True), (5, False)]]
    assert runs[0] == runs[1] == runs[2]


def test_quantized_caches_fall_back_to_per_batch(fp32, tokenizer):
    assert can_refill(fp32, None)
    assert not can_refill(fp32, make_cache(KVConfig(bits=4, group=8, residual=8), fp32.config))
    assert not can_refill(fp32, make_cache(KVConfig(backend="hf", bits=4, group=16, residual=8), fp32.config))


def test_grow_layer_holds_what_concatenation_holds():
    from evalsuite.backends.inprocess.growcache import SPARE, GrowLayer

    gen = torch.Generator().manual_seed(0)
    layer, ks, vs = GrowLayer(), [], []
    for n in [5] + [1] * (SPARE + 20):  # past the spare columns: the buffer is remade
        k, v = torch.randn(2, 3, n, 4, generator=gen), torch.randn(2, 3, n, 4, generator=gen)
        ks.append(k)
        vs.append(v)
        keys, values = layer.update(k, v)
    assert torch.equal(keys, torch.cat(ks, -2)) and torch.equal(values, torch.cat(vs, -2))
    assert layer.get_seq_length() == 5 + SPARE + 20


def test_prefill_chunks_group_similar_lengths_within_the_padded_budget():
    from evalsuite.backends.inprocess.refill import prefill_chunks

    lengths = [300, 40, 50, 400, 45, 310, 5000]
    chunks = prefill_chunks(lengths, 1000)
    assert sorted(j for c in chunks for j in c) == list(range(len(lengths)))
    assert chunks == [[1, 4, 2], [0, 5], [3], [6]]  # length order; a prompt over the budget goes alone
    for c in chunks[:-1]:
        assert max(lengths[j] for j in c) * len(c) <= 1000


def test_refill_with_chunked_admission_equals_per_batch(fp32, tokenizer, monkeypatch):
    """Newcomers prefilled in several small forwards decode exactly as their own batches do."""
    import evalsuite.backends.inprocess.refill as refill

    calls = []
    monkeypatch.setattr(refill, "PREFILL_TOKENS", 40)
    monkeypatch.setattr(refill, "prefill", lambda *a, orig=refill.prefill: (calls.append(len(a[1])), orig(*a))[1])
    gen = GenSettings(max_new_tokens=10, stop=("e",))
    per_batch = _run(fp32, tokenizer, _prompts(MORE), gen, max_batch=4, refill=False)
    chunked = _run(fp32, tokenizer, _prompts(MORE), gen, max_batch=8, refill=True)
    assert len(calls) > 2 and min(calls) < 8
    assert [(g.text, g.n_tokens) for g in per_batch] == [(g.text, g.n_tokens) for g in chunked]
