"""Runner + store: identical samples for every variant, determinism, resume after a crash, stored metrics."""
from __future__ import annotations

import pytest

from evalsuite.backends.inprocess.inprocess import InProcessBackend
from evalsuite.store.sqlite import Store
from evalsuite.tasks.base import Score
from tests.conftest import prepared, run_model
from tests.toytask import CopyTask

VARIANTS = ("bf16", "w8", "kv4g32r16")


@pytest.mark.slow
def test_every_variant_sees_identical_samples_and_is_stored(tiny, tmp_path):
    store = run_model(tiny, tmp_path / "a", VARIANTS)
    by_variant = {v: store.samples(v) for v in VARIANTS}
    ids = [[(r.sample_id, r.prompt_hash) for r in rows] for rows in by_variant.values()]
    assert ids[0] == ids[1] == ids[2] and len(ids[0]) == 6
    infos = store.variant_infos()
    assert infos["w8"].weight_bytes < infos["bf16"].weight_bytes
    assert infos["kv4g32r16"].kv_formula_bytes_per_token < infos["bf16"].kv_formula_bytes_per_token
    assert all(i.ttft_s and i.ttft_s > 0 for i in infos.values())
    kld = store.kld("w8")
    assert len(kld) == 6 and all(len(k.token_kld) == k.n_tokens for k in kld)
    assert store.meta()["kld_method"].startswith("teacher-forced")


@pytest.mark.slow
def test_greedy_rerun_is_identical(tiny, tmp_path):
    a = run_model(tiny, tmp_path / "a")
    b = run_model(tiny, tmp_path / "b")
    assert [r.output for r in a.samples()] == [r.output for r in b.samples()]


def test_baseline_vs_itself_kld_is_zero(tiny, tmp_path):
    store = run_model(tiny, tmp_path / "a", kld=False)
    backend = InProcessBackend.of(tiny)
    (bf16,) = backend.variants(["bf16"])
    task = prepared()[0]
    idx = list(range(len(task.samples)))
    answers = [r.output for r in sorted(store.samples("bf16"), key=lambda r: int(r.sample_id.split("-")[1]))]
    rows = [k for chunk in backend.kld(bf16, "self", task, idx, answers, 4) for k in chunk]
    assert len(rows) == 6
    assert all(max(k.token_kld, default=0) < 1e-6 and k.top1_agree == k.n_tokens for k in rows)


class ArmedCopyTask(CopyTask):
    """CopyTask whose scorer raises after ``crash_after`` scorings while armed (a crash in the middle of a run);
    it counts every scoring so a test can see what was generated again."""

    def __init__(self, crash_after: int | None = None) -> None:
        self.crash_after, self.scored = crash_after, []

    def score(self, sample, output) -> Score:
        self.scored.append(sample.id)
        if self.crash_after is not None and len(self.scored) > self.crash_after:
            raise KeyboardInterrupt("simulated crash")
        return super().score(sample, output)


@pytest.mark.slow
def test_resume_after_crash_loses_and_repeats_nothing_committed(tiny, tmp_path):
    task = ArmedCopyTask()
    tasks = prepared(task)
    run_model(tiny, tmp_path / "r", ("bf16",), tasks=tasks, batch_size=2)
    task.scored.clear()
    task.crash_after = 5  # w8: the refilled decoder yields each sample as its row finishes: 5 stored, crash on 6
    store = Store.open(tmp_path / "r")
    with pytest.raises(KeyboardInterrupt):  # the generation path (verification stores a batch at a time)
        run_model(tiny, None, ("bf16", "w8"), tasks=tasks, batch_size=2, store=store, verify=False)
    assert len(store.samples("bf16")) == 6 and len(store.samples("w8")) == 5
    first = {r.sample_id: r.output for r in store.samples("w8")}
    task.crash_after, task.scored = None, []
    run_model(tiny, None, ("bf16", "w8"), tasks=tasks, batch_size=2, store=store, verify=False)
    all_ids = {s.id for s in tasks[0].samples}
    assert sorted(task.scored) == sorted(all_ids - set(first))  # only the missing one
    assert len(store.samples("w8")) == 6
    assert {r.sample_id: r.output for r in store.samples("w8") if r.sample_id in first} == first


def test_changed_fingerprint_is_refused(tiny, tmp_path):
    from tests.conftest import make_tiny_model

    from evalsuite.errors import StoreMismatch
    from evalsuite.models import wrap_model

    store = run_model(tiny, tmp_path / "a", kld=False)
    other = wrap_model(make_tiny_model(len(tiny.tokenizer), seed=7), tiny.tokenizer, name="tiny")
    with pytest.raises(StoreMismatch, match="fingerprint"):
        run_model(other, None, store=store)


@pytest.mark.slow
def test_a_variant_identical_to_the_baseline_takes_its_answers_which_recomputing_reproduces(tokenizer, tmp_path):
    from evalsuite.run.runner import SAME_AS_BASELINE
    from tests.variants.test_identical import on_int4_grid

    base, lines = on_int4_grid(tokenizer), []
    backend = InProcessBackend.of(base)
    generated = []  # variants whose answers were computed (generated, or verified against the baseline's)
    orig, orig_verify = backend.generate, backend.verify
    backend.generate = lambda v, name, *a: (generated.append(name), orig(v, name, *a))[1]
    backend.verify = lambda v, name, *a: (generated.append(name), orig_verify(v, name, *a))[1]
    store = run_model(base, tmp_path / "a", ("bf16", "w4g32", "w4g64"), backend=backend, log=lines.append)
    assert "w4g32" not in generated and "w4g64" in generated
    assert [r.output for r in store.samples("w4g32")] == [r.output for r in store.samples("bf16")]
    kld = store.kld("w4g32")
    assert len(kld) == 6 and all(k.method == SAME_AS_BASELINE and not any(k.token_kld) for k in kld)
    assert store.meta()["same_as_baseline"] == ["w4g32"] and any("bit-identical" in s for s in lines)
    again = run_model(base, tmp_path / "b", ("bf16", "w4g32"), reuse_identical=False)  # really generated
    assert [r.output for r in again.samples("w4g32")] == [r.output for r in store.samples("w4g32")]
    assert max(x for k in again.kld("w4g32") for x in k.token_kld) < 1e-4  # float noise of other batch shapes
    assert "same_as_baseline" not in again.meta()
