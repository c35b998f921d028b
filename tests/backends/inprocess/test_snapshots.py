"""A variant's KLD reuses the prompt K/V of its own generation instead of a second prompt prefill."""
import pytest
import torch
from transformers import DynamicCache

from evalsuite.backends.inprocess.decoder import Prefix
from evalsuite.backends.inprocess.inprocess import InProcessBackend
from evalsuite.backends.inprocess.snapshots import PromptSnapshots, PromptStore
from tests.conftest import prepared, run_model


def _cache(batch, width, layers=2, heads=3, dim=4):
    cache = DynamicCache()
    for i in range(layers):
        cache.update(torch.randn(batch, heads, width, dim), torch.randn(batch, heads, width, dim), i)
    return cache


def test_rows_are_kept_unpadded_and_repadded_for_another_batch():
    cache = _cache(2, 5)
    mask = torch.tensor([[1, 1, 0, 1, 1], [1, 1, 1, 1, 1]])  # [prefix 2][padding 1][own 2] and [prefix 2][own 3]
    last = torch.randn(2, 7)
    snaps = PromptSnapshots()
    snaps.observe(Prefix((9, 9), None), [[1, 2], [3, 4, 5]], cache, last, mask)
    assert set(snaps.rows) == {(9, 9, 1, 2), (9, 9, 3, 4, 5)} and snaps.used > 0
    assert snaps.take([(9, 9, 1, 2), (1,)]) is None and len(snaps.rows) == 2  # all or nothing
    layers, got_last, got_mask = snaps.take([(9, 9, 3, 4, 5), (9, 9, 1, 2)])
    assert got_mask.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]
    assert torch.equal(got_last, last[[1, 0]])
    k0 = layers[0][0]
    assert torch.equal(k0[0], cache.layers[0].keys[1])
    assert torch.equal(k0[1, :, 1:], cache.layers[0].keys[0][:, [0, 1, 3, 4]])
    assert not snaps.rows and snaps.used == 0


def test_budget_bounds_what_is_kept():
    cache = _cache(2, 5)
    snaps = PromptSnapshots(max_bytes=2 * 2 * 3 * 5 * 4 * 4)  # one row's K and V over 2 layers, 5 tokens, fp32
    snaps.observe(None, [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]], cache, torch.zeros(2, 3), torch.ones(2, 5))
    assert list(snaps.rows) == [(1, 2, 3, 4, 5)]


@pytest.mark.slow
def test_kld_from_generation_snapshot_matches_a_second_prefill(tiny, tmp_path):
    spec = "w4g64"
    tasks = prepared(n=5, stop_at_newline=False)
    kept = InProcessBackend.of(tiny, snapshot_bytes=1 << 30)
    fresh = InProcessBackend.of(tiny, snapshot_bytes=0)
    a = run_model(tiny, tmp_path / "a", variants=("bf16", spec), tasks=tasks, backend=kept)
    b = run_model(tiny, tmp_path / "b", variants=("bf16", spec), tasks=tasks, backend=fresh)
    ka, kb = ({(k.variant, k.sample_id): k for k in s.kld()} for s in (a, b))
    assert ka.keys() == kb.keys() and len(ka) == 5
    for key in ka:
        assert ka[key].n_tokens == kb[key].n_tokens
        assert ka[key].mean == pytest.approx(kb[key].mean, rel=1e-3, abs=1e-5)
        assert ka[key].mean > 0  # a real quantized variant, not the baseline


def test_generation_keeps_snapshots_only_for_own_weights_and_kld_takes_them(tiny):
    backend = InProcessBackend.of(tiny, snapshot_bytes=1 << 30)
    task = prepared(n=3, stop_at_newline=False)[0]
    base, kv, w4kv, w4 = backend.variants(["bf16", "kv4g32", "w4g64+kv4g32", "w4g64"])
    # the baseline's weights: its own snapshot path serves them; a quantized cache lays K/V out by its batch
    for spec, expect in ((base, 0), (kv, 0), (w4kv, 0), (w4, 3)):
        rows = [r for batch in backend.generate(spec, spec.name, task, [0, 1, 2], 4) for r in batch]
        assert len(backend.snapshots.rows) == expect, spec.name
    answers = [r.output for r in rows]
    assert len(backend.base_prompts.rows) == 3  # the baseline's prompts, for the baseline side of every KLD pass
    got = [k for b in backend.kld(w4, w4.name, task, [0, 1, 2], answers, 4) for k in b]
    assert len(backend.snapshots.rows) == 3  # read by the KLD pass, kept for a "+kv" sibling's verification
    assert len(backend.base_prompts.rows) == 3  # kept for the next variant
    fresh = InProcessBackend.of(tiny, snapshot_bytes=0)  # both prompt prefills recomputed
    ref = {k.sample_id: k for b in fresh.kld(w4, w4.name, task, [0, 1, 2], answers, 4) for k in b}
    for k in got:
        assert k.n_tokens == ref[k.sample_id].n_tokens
        assert k.mean == pytest.approx(ref[k.sample_id].mean, rel=1e-3, abs=1e-6)


def _prefill_forwards(model):
    """Count the model's multi-token forwards over a batch of more than one row (prompt prefills)."""
    calls = []

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[0] > 1 and ids.shape[1] > 1:
            calls.append(tuple(ids.shape))

    return calls, model.register_forward_pre_hook(hook, with_kwargs=True)


def test_kv_only_variant_starts_from_the_baselines_prompt_kv(tiny):
    backend = InProcessBackend.of(tiny, reuse_base_prompts=True)
    task = prepared(n=4, stop_at_newline=False)[0]
    base, kv = backend.variants(["bf16", "kv8"])
    base_rows = [r for b in backend.generate(base, base.name, task, [0, 1, 2, 3], 4) for r in b]
    assert len(backend.base_prompts.rows) == 4
    calls, handle = _prefill_forwards(tiny.model)
    try:
        kv_rows = [r for b in backend.generate(kv, kv.name, task, [0, 1, 2, 3], 4) for r in b]
    finally:
        handle.remove()
    assert calls == [], "the KV variant's prompts were not prefilled again"
    assert len(backend.base_prompts.rows) == 4  # still held for the next KV variant
    fresh = InProcessBackend.of(tiny, snapshot_bytes=0)
    again = [r for b in fresh.generate(kv, kv.name, task, [0, 1, 2, 3], 4) for r in b]
    same = {r.sample_id: r.output for r in again}
    assert sum(same[r.sample_id] == r.output for r in kv_rows) >= 3  # kv8 on the same K/V: same answers
    assert {r.sample_id for r in kv_rows} == {r.sample_id for r in base_rows}


def test_baseline_prompts_evict_the_oldest_past_the_budget():
    cache = _cache(1, 5)
    row = 2 * 2 * 3 * 5 * 4 * 4
    snaps = PromptSnapshots(max_bytes=2 * row, evict=True)
    for r in range(3):
        snaps.observe(None, [[r, 1, 2, 3, 4]], cache, torch.zeros(1, 3), torch.ones(1, 5))
    assert list(snaps.rows) == [(1, 1, 2, 3, 4), (2, 1, 2, 3, 4)] and snaps.used == 2 * row


def test_one_store_one_budget_the_baselines_rows_make_room():
    """Both parts share the store's budget: a variant's rows are held (the first ones kept), the baseline's are a
    cache whose oldest go for a new row of either part."""
    cache = _cache(1, 5)
    row = 2 * 2 * 3 * 5 * 4 * 4
    store = PromptStore(max_bytes=3 * row)
    base, own = store.part("base", evict=True), store.part("variant", owner="w4")
    for r in range(3):
        base.observe(None, [[r, 1, 2, 3, 4]], cache, torch.zeros(1, 3), torch.ones(1, 5))
    assert len(base.rows) == 3 and store.used == 3 * row
    for r in range(4):
        own.observe(None, [[9, r, 2, 3, 4]], cache, torch.zeros(1, 3), torch.ones(1, 5))
    assert list(own.rows) == [(9, 0, 2, 3, 4), (9, 1, 2, 3, 4), (9, 2, 2, 3, 4)] and not base.rows
    base.observe(None, [[7, 1, 2, 3, 4]], cache, torch.zeros(1, 3), torch.ones(1, 5))
    assert not base.rows  # nothing of its own to evict, and a variant's rows are held until taken
    again = store.part("variant", owner="w8")  # the next generation's part: the previous one's rows dropped
    assert not own.rows and not again.rows and store.used == 0
    own.observe(None, [[8, 1, 2, 3, 4]], cache, torch.zeros(1, 3), torch.ones(1, 5))
    assert not own.rows  # a replaced part keeps nothing more
    store.clear()
    assert store.used == 0
