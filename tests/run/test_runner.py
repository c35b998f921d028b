"""Runner + store: identical samples for every variant, determinism, resume after a crash, stored metrics."""
from __future__ import annotations

import pytest

from evalsuite.run.config import RunConfig
from evalsuite.run.prepare import PreparedTask, prepare_variants
from evalsuite.run.runner import Runner
from evalsuite.run.store import Store
from tests.toytask import CopyTask


def _prepared(n=6, seed=1):
    task = CopyTask()
    params = task.params({"n": n})
    return [PreparedTask(task, params, task.gen_settings(params), task.samples(params, seed))]


def _run(tiny, tmp_path, name, variants=("bf16", "w8", "kv4g32r16"), batch_size=4, kld=True, store=None):
    config = RunConfig(model="tiny", variants=list(variants), tasks=["copy"], batch_size=batch_size, kld=kld)
    store = store or Store.create(tmp_path / name, config.to_dict())
    Runner(config, tiny, _prepared(), store, progress=False, log=lambda s: None).run(prepare_variants(config))
    return store


def test_every_variant_sees_identical_samples_and_is_stored(tiny, tmp_path):
    store = _run(tiny, tmp_path, "a")
    by_variant = {v: store.samples(v) for v in ("bf16", "w8", "kv4g32r16")}
    ids = [[(r.sample_id, r.prompt_hash) for r in rows] for rows in by_variant.values()]
    assert ids[0] == ids[1] == ids[2] and len(ids[0]) == 6
    infos = store.variant_infos()
    assert infos["w8"].weight_bytes < infos["bf16"].weight_bytes
    assert infos["kv4g32r16"].kv_formula_bytes_per_token < infos["bf16"].kv_formula_bytes_per_token
    assert all(i.ttft_s and i.ttft_s > 0 for i in infos.values())
    kld = store.kld("w8")
    assert len(kld) == 6 and all(len(k.token_kld) == k.n_tokens for k in kld)


def test_greedy_rerun_is_identical(tiny, tmp_path):
    a = _run(tiny, tmp_path, "a", variants=("bf16",))
    b = _run(tiny, tmp_path, "b", variants=("bf16",))
    assert [r.output for r in a.samples()] == [r.output for r in b.samples()]


def test_baseline_vs_itself_kld_is_zero(tiny, tmp_path):
    store = _run(tiny, tmp_path, "a", variants=("bf16",), kld=False)
    runner = Runner(RunConfig(model="tiny", tasks=["copy"]), tiny, _prepared(), store, progress=False)
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import parse_variant

    runner._kld_variant(build_variant(tiny, parse_variant("bf16")), "bf16", name="self")
    assert all(max(k.token_kld, default=0) < 1e-6 and k.top1_agree == k.n_tokens for k in store.kld("self"))


def test_resume_after_crash_loses_and_repeats_nothing(tiny, tmp_path, monkeypatch):
    import evalsuite.run.runner as runner_mod

    calls = {"n": 0}
    real = runner_mod.Runner._score

    def crash_on_third_batch(self, task, i, g, name):
        if name == "w8":
            calls["n"] += 1
            if calls["n"] == 5:  # batch size 2: batches 1-2 stored, crash inside batch 3
                raise KeyboardInterrupt("simulated crash")
        return real(self, task, i, g, name)

    monkeypatch.setattr(runner_mod.Runner, "_score", crash_on_third_batch)
    with pytest.raises(KeyboardInterrupt):
        _run(tiny, tmp_path, "r", variants=("bf16", "w8"), batch_size=2)
    store = Store.open(tmp_path / "r")
    assert len(store.samples("bf16")) == 6 and len(store.samples("w8")) == 4
    first = {r.sample_id: r.output for r in store.samples("w8")}
    monkeypatch.setattr(runner_mod.Runner, "_score", real)
    generated = []
    orig_put = Store.put_samples
    monkeypatch.setattr(Store, "put_samples", lambda self, rows: (rows := list(rows), generated.extend(rows),
                                                                    orig_put(self, rows))[-1])
    _run(tiny, tmp_path, "r", variants=("bf16", "w8"), batch_size=2, store=store)
    all_ids = {s.id for s in _prepared()[0].samples}
    assert sorted(r.sample_id for r in generated) == sorted(all_ids - set(first))  # only the 2 missing ones
    assert len(store.samples("w8")) == 6
    assert {r.sample_id: r.output for r in store.samples("w8") if r.sample_id in first} == first


def test_changed_fingerprint_is_refused(tiny, tmp_path):
    from tests.conftest import make_tiny_model

    from evalsuite.errors import StoreMismatch
    from evalsuite.models import wrap_model

    store = _run(tiny, tmp_path, "a", variants=("bf16",), kld=False)
    other = wrap_model(make_tiny_model(len(tiny.tokenizer), seed=7), tiny.tokenizer, name="tiny")
    with pytest.raises(StoreMismatch, match="fingerprint"):
        _run(other, tmp_path, "a", variants=("bf16",), store=store)
