"""The baseline's prompt K/V on disk: written as the baseline prefills, read back exactly by a later run's
snapshots, bounded by a byte budget; a stored baseline's later run prefills none of its stored prompts again."""
from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from evalsuite.core.config import RunConfig
from evalsuite.backends.inprocess.inprocess import InProcessBackend
from evalsuite.backends.inprocess.snapshots import PromptSnapshots
from evalsuite.backends.inprocess.spill import PromptDisk
from evalsuite.run.pipeline import execute
from evalsuite.tasks.registry import Registry
from tests.toytask import CopyTask


def _cache(batch, width, layers=2, heads=3, dim=4):
    cache = DynamicCache()
    for i in range(layers):
        cache.update(torch.randn(batch, heads, width, dim), torch.randn(batch, heads, width, dim), i)
    return cache


def _row(width=5, layers=2):
    kv = tuple((torch.randn(3, width, 4).bfloat16(), torch.randn(3, width, 4).bfloat16()) for _ in range(layers))
    return kv, torch.randn(7)


def test_a_row_reads_back_bit_for_bit_and_only_for_its_own_ids(tmp_path):
    disk = PromptDisk(tmp_path / "kv")
    row = _row()
    assert disk.get((1, 2, 3)) is None and disk.put((1, 2, 3), row) and disk.has((1, 2, 3))
    kv, last = PromptDisk(tmp_path / "kv").get((1, 2, 3))  # a later process
    assert all(torch.equal(a, b) and a.dtype == torch.bfloat16 for (a, _), (b, _) in zip(kv, row[0]))
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(kv, row[0])) and torch.equal(last, row[1])
    # a file named for these ids but holding others (a hash collision) reads as a miss
    disk.path((4, 5)).write_bytes(disk.path((1, 2, 3)).read_bytes())
    assert disk.get((4, 5)) is None
    assert not list((tmp_path / "kv").glob(".*.tmp"))


def test_the_budget_keeps_the_first_rows(tmp_path):
    one = PromptDisk(tmp_path / "a")
    one.put((1,), _row())
    size = one.used
    disk = PromptDisk(tmp_path / "b", max_bytes=int(size * 1.5))
    assert disk.put((1,), _row()) and not disk.put((2,), _row()) and not disk.has((2,))
    assert PromptDisk(tmp_path / "b").used == disk.used  # counted again when reopened


def test_snapshots_write_what_they_observe_and_a_fresh_store_takes_it_from_disk(tmp_path):
    cache = _cache(2, 5)
    mask = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    last = torch.randn(2, 7)
    first = PromptSnapshots(evict=True)
    first.spill = PromptDisk(tmp_path)
    first.observe(None, [[1, 2, 3, 4], [5, 6, 7, 8, 9]], cache, last, mask)
    assert len(list(tmp_path.glob("*.safetensors"))) == 2
    later = PromptSnapshots(evict=True)
    assert later.take([(5, 6, 7, 8, 9)], keep=True) is None  # memory alone holds nothing
    later.spill = PromptDisk(tmp_path)
    assert later.take([(5, 6, 7, 8, 9), (7,)], keep=True) is None and not later.rows  # all or nothing
    want = first.take([(1, 2, 3, 4), (5, 6, 7, 8, 9)], keep=True)
    got = later.take([(1, 2, 3, 4), (5, 6, 7, 8, 9)], keep=True)
    assert torch.equal(got[2], want[2]) and torch.equal(got[1], want[1])
    assert all(torch.equal(a, b) for la, lb in zip(got[0], want[0]) for a, b in zip(la, lb))
    assert len(later.rows) == 2  # kept in memory for the next variant


def test_a_full_memory_still_writes_to_disk(tmp_path):
    cache = _cache(2, 5)
    snaps = PromptSnapshots(max_bytes=2 * 2 * 3 * 5 * 4 * 4)  # one row in memory
    snaps.spill = PromptDisk(tmp_path)
    snaps.observe(None, [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]], cache, torch.zeros(2, 3), torch.ones(2, 5))
    assert list(snaps.rows) == [(1, 2, 3, 4, 5)] and snaps.spill.has((6, 7, 8, 9, 10))


def _fed_tokens(model):
    """Count the tokens the model is fed (every forward's input_ids)."""
    fed = []

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None:
            fed.append(ids.numel())

    return fed, model.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.mark.slow
def test_a_stored_baselines_later_run_takes_its_prompt_kv_from_disk(tiny, tmp_path):
    """A new KV candidate against a stored baseline: the baseline's answers are imported, its prompts' K/V read
    from the disk beside them (not prefilled again), and the results are those of a recomputed prefill."""
    reg = Registry()
    reg.register("copy", CopyTask)
    root = tmp_path / "baselines"

    def go(run, variants, baselines, strict=False):
        config = RunConfig(model="tiny", variants=variants, tasks=["copy"], batch_size=4)
        fed, handle = _fed_tokens(tiny.model)
        try:
            store = execute(config, tmp_path / run, False, InProcessBackend.of(tiny, seed=config.seed),
                            progress=False, log=lambda s: None, registry=reg, baselines=baselines,
                            strict_baseline=strict, grow_baseline=not strict)
        finally:
            handle.remove()
        return store, sum(fed)

    go("cold", ["bf16"], root)
    (folder,) = (root / p.name / "prompt_kv" for p in root.iterdir() if p.is_dir())
    (kv,) = folder.iterdir()
    assert len(list(kv.glob("*.safetensors"))) == 6  # CopyTask's six prompts
    warm, fed_warm = go("warm", ["bf16", "kv4g32"], root)
    # strict reuse (--baseline) reads the files too, and writes none: its folder may be a checked-in one
    strict, fed_strict = go("strict", ["bf16", "kv8g32"], root, strict=True)
    assert len(list(kv.glob("*.safetensors"))) == 6 and len(list(folder.iterdir())) == 1
    # the same run with the prompts prefilled again (the stored answers imported, the K/V files gone)
    for f in kv.glob("*.safetensors"):
        f.unlink()
    again, fed_again = go("again", ["bf16", "kv4g32"], root)
    assert fed_warm < fed_again
    for f in kv.glob("*.safetensors"):  # "again" grew them back
        f.unlink()
    strict_again, fed_strict_again = go("strict-again", ["bf16", "kv8g32"], root, strict=True)
    assert fed_strict < fed_strict_again and not list(kv.glob("*.safetensors"))  # nothing written back
    name = next(k.variant for k in warm.kld())  # kv4g32's full name
    a = {r.sample_id: r for r in warm.samples(name)}
    b = {r.sample_id: r for r in again.samples(name)}
    assert a.keys() == b.keys() and len(a) == 6
    assert sum(a[s].output == b[s].output for s in a) >= 5
    ka = {k.sample_id: k.mean for k in warm.kld() if k.variant == name}
    kb = {k.sample_id: k.mean for k in again.kld() if k.variant == name}
    assert ka.keys() == kb.keys() and all(abs(ka[s] - kb[s]) <= 1e-2 * max(kb[s], 1e-3) + 1e-4 for s in ka)


def test_rows_read_back_land_on_the_runs_device(tmp_path):
    """A CUDA run's spilled prompt K/V must come back on the GPU: checked on the meta device, which a CPU has."""
    PromptDisk(tmp_path).put((1, 2, 3), _row())
    kv, last = PromptDisk(tmp_path, device="meta").get((1, 2, 3))
    assert {t.device.type for pair in kv for t in pair} == {"meta"} and last.device.type == "meta"
    assert kv[0][0].dtype == torch.bfloat16 and kv[0][0].shape == (3, 5, 4)


def test_the_backend_reads_spilled_rows_onto_the_baselines_device(tiny, tmp_path):
    """``spill_prompts`` reads onto the model's device: the rows taken, padded and filled into a cache for a
    baseline on the meta device (standing in for a GPU) are all on it, none left on the CPU."""
    import copy
    from dataclasses import replace

    PromptDisk(tmp_path).put((1, 2, 3), _row(3, tiny.model.config.num_hidden_layers))
    PromptDisk(tmp_path).put((4, 5), _row(2, tiny.model.config.num_hidden_layers))
    on_meta = replace(tiny, model=copy.deepcopy(tiny.model).to("meta"))
    backend = InProcessBackend.of(on_meta)
    backend.spill_prompts(tmp_path, writable=False)
    layers, last, mask = backend.base_prompts.take([(1, 2, 3), (4, 5)], keep=True)
    assert {t.device.type for pair in layers for t in pair} == {"meta"} and last.device.type == "meta"
    assert mask.device.type == "meta"
    cache, _, _ = backend.base_prompts.provide(on_meta.model.config)(None, [[1, 2, 3], [4, 5]])
    assert all(layer.keys.device.type == "meta" for layer in cache.layers)


def test_left_pad_keeps_each_layer_on_its_own_device():
    """A model spread over devices holds each layer's K/V where that layer runs; padding keeps them there."""
    from evalsuite.backends.inprocess.decoder import left_pad

    row = ((torch.randn(3, 4, 2), torch.randn(3, 4, 2)),
           (torch.randn(3, 4, 2).to("meta"), torch.randn(3, 4, 2).to("meta")))
    short = ((torch.randn(3, 2, 2), torch.randn(3, 2, 2)),
             (torch.randn(3, 2, 2).to("meta"), torch.randn(3, 2, 2).to("meta")))
    layers, mask = left_pad([row, short])
    assert [k.device.type for k, _ in layers] == ["cpu", "meta"] and mask.tolist()[1] == [0, 0, 1, 1]
    assert torch.equal(layers[0][0][1, :, 2:], short[0][0])
