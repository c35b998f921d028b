"""Verification inside a run: the same answers as regeneration, stored paths, tallies, audit, bad input."""
from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
import torch

from evalsuite.store.sqlite import Store
from evalsuite.run.verified import audited
from tests.conftest import make_tiny_model, prepared, run_model

VARIANTS = ("bf16", "w4g32", "kv4g32r8", "w4g32+kv2g32r8", "kvhf4g16r8")


def fp32_tiny(tokenizer):
    from evalsuite.models import wrap_model

    return wrap_model(make_tiny_model(len(tokenizer), dtype=torch.float32), tokenizer, name="tiny32")


@pytest.mark.slow
def test_verified_runs_store_the_answers_regeneration_gives(tokenizer, tmp_path):
    loaded = fp32_tiny(tokenizer)
    tasks = prepared(n=8, seed=2)
    on = run_model(loaded, tmp_path / "on", VARIANTS, tasks=tasks, verify_audit=1.0)
    off = run_model(loaded, tmp_path / "off", VARIANTS, tasks=tasks, verify=False)
    for v in VARIANTS:
        assert {r.sample_id: r.output for r in on.samples(v)} == {r.sample_id: r.output for r in off.samples(v)}
    base = on.samples("bf16")
    assert all(r.decode == "generated" and r.stop in ("eos", "stop", "length") for r in base)
    assert all(len(r.token_ids) == r.n_tokens for r in base)
    paths = {r.decode.split("@")[0] for v in VARIANTS[1:4] for r in on.samples(v)}
    assert paths <= {"verified", "diverged"} and all(r.decode == "generated" for r in off.samples("w4g32"))
    assert {r.decode for r in on.samples("kvhf4g16r8")} == {"regenerated"}  # transformers' cache: regenerated
    meta = on.meta()
    assert "QuantizedCache" in meta["unverified"]["kvhf4g16r8"]["copy"]
    tally = meta["verify"]["w4g32"]["copy"]
    assert tally["verified"] + tally["diverged"] == 8 and tally["positions"] > 0
    assert 0 <= tally["stepped"] <= tally["near_ties"]  # near-ties a decode step decided
    audit = meta["verify_audit"]["w4g32"]["copy"]
    assert audit["n"] == tally["verified"] and audit["same"] == audit["n"]  # F = 1: every verified sample
    kld = {k.sample_id: k for k in on.kld("kv4g32r8")}
    assert len(kld) == 8 and all(k.method == "verify-pass" and len(k.token_kld) == k.n_tokens for k in kld.values())


@pytest.mark.slow
def test_rows_without_token_ids_regenerate(tiny, tmp_path):
    """A store written before token ids were kept: its baseline rows are not verified against."""
    tasks = prepared(n=4, seed=2)
    store = run_model(tiny, tmp_path / "r", ("bf16",), tasks=tasks)
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE samples SET token_ids='[]', stop=''")
    run_model(tiny, None, ("bf16", "w4g32"), tasks=tasks, store=store)
    assert {r.decode for r in store.samples("w4g32")} == {"regenerated"}


def test_an_old_store_gains_the_new_columns(tmp_path):
    path = tmp_path / Store.FILENAME
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE samples (variant TEXT, task TEXT, task_version TEXT, sample_id TEXT, "
                     "prompt_hash TEXT, prompt TEXT, output TEXT, score REAL, extracted TEXT, reason TEXT, "
                     "metadata TEXT, n_tokens INTEGER, ttft_s REAL, itl_s REAL, metrics TEXT, outputs TEXT, "
                     "created REAL, PRIMARY KEY (variant, task, sample_id))")
        conn.execute("INSERT INTO samples VALUES ('bf16','t','1','s1','h','p','out',1.0,NULL,'','{}',3,NULL,NULL,"
                     "'{}','[]',0)")
    (row,) = Store(path).samples()
    assert row.output == "out" and row.token_ids == () and row.stop == "" and row.decode == ""


def test_the_audit_fraction_is_seeded_per_sample():
    ids = [f"s{i}" for i in range(2000)]
    picked = [s for s in ids if audited(7, s, 0.1)]
    assert 150 < len(picked) < 250 and picked == [s for s in ids if audited(7, s, 0.1)]
    assert not any(audited(7, s, 0.0) for s in ids) and all(audited(7, s, 1.0) for s in ids)


@pytest.mark.slow
def test_an_audit_fraction_outside_0_1_is_exit_2(tmp_path):
    code = "from evalsuite.cli import main\nmain()"
    res = subprocess.run([sys.executable, "-c", code, "run", "--verify-audit", "1.5", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2 and "--verify-audit" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_the_report_says_how_answers_were_obtained(tokenizer, tmp_path):
    from evalsuite.gate.store_gate import gate_store
    from evalsuite.report.build import report_model
    from evalsuite.report.markdown import render_markdown

    store = run_model(fp32_tiny(tokenizer), tmp_path / "r", ("bf16", "w4g32", "kvhf4g16r8"),
                      tasks=prepared(n=4, seed=2), verify_audit=1.0)
    report = report_model(store, gate_store(store, None)).to_dict()
    ver = report["verification"]
    assert ver["w4g32"].get("verified", 0) + ver["w4g32"].get("diverged", 0) == 4
    assert ver["kvhf4g16r8"]["regenerated"] == 4 and "bf16" not in ver
    assert ver["w4g32"]["audited"] == ver["w4g32"].get("verified", 0)
    assert "4 regenerated" in render_markdown(report)


@pytest.mark.slow
def test_bf16_weight_only_variants_regenerate_only_without_invariant_kernels(tiny, tmp_path):
    """``--verify auto`` (the backend's ``verify_bf16=False``) verifies every greedy variant on batch-invariant
    kernels; on other kernels (here SDPA) it regenerates a weight-only variant in bf16 compute and says why, and
    still verifies a KV-cache variant; ``on`` verifies both."""
    from evalsuite.backends.inprocess.inprocess import InProcessBackend
    from evalsuite.backends.inprocess.verify import BF16_UNVERIFIED
    from evalsuite.models.invariance import invariant

    assert str(tiny.dtype).removeprefix("torch.") == "bfloat16"
    tasks, variants = prepared(n=4, seed=2), ("bf16", "w4g32", "kv4g32r8")
    exact = run_model(tiny, tmp_path / "exact", variants, tasks=tasks,
                      backend=InProcessBackend.of(tiny, verify_bf16=False))
    if invariant(tiny.model):
        assert {r.decode.split("@")[0] for r in exact.samples("w4g32")} <= {"verified", "diverged"}
        assert "w4g32" not in exact.meta().get("unverified", {})
    tiny.model.set_attn_implementation("sdpa")
    assert not invariant(tiny.model)
    auto = run_model(tiny, tmp_path / "auto", variants, tasks=tasks,
                     backend=InProcessBackend.of(tiny, verify_bf16=False))
    assert {r.decode for r in auto.samples("w4g32")} == {"regenerated"}
    assert auto.meta()["unverified"]["w4g32"]["copy"] == BF16_UNVERIFIED
    assert {r.decode.split("@")[0] for r in auto.samples("kv4g32r8")} <= {"verified", "diverged"}
    on = run_model(tiny, tmp_path / "on", variants, tasks=tasks, backend=InProcessBackend.of(tiny, verify_bf16=True))
    assert {r.decode.split("@")[0] for r in on.samples("w4g32")} <= {"verified", "diverged"}
    assert "w4g32" not in on.meta().get("unverified", {})


def _rounds_run(loaded, run_dir, variants, tasks, backend):
    """A sequential run (variants stay built across its rounds, as ``make gate``'s do) of one round."""
    from evalsuite.core.config import RunConfig
    from evalsuite.store.sqlite import Store
    from evalsuite.gate.decide import store_decider
    from evalsuite.run.draws import task_cap
    from evalsuite.run.pipeline import drive
    from evalsuite.run.rounds import Rounds
    from evalsuite.run.runner import Runner

    config = RunConfig(model="tiny", variants=list(variants), tasks=[t.name for t in tasks], batch_size=4,
                       max_samples=len(tasks[0].samples), round_size=len(tasks[0].samples))
    store = Store.create(run_dir, config.to_dict())
    rounds = Rounds(caps={t.name: task_cap(t, config.max_samples) for t in tasks}, round_size=config.round_size,
                    log=lambda s: None, batch_size=4)
    runner = Runner(config, backend, tasks, store, progress=False, log=lambda s: None)
    drive(runner, backend.variants(variants), rounds, store_decider(None))
    return store


def _count_takes(monkeypatch):
    """Every ``PromptSnapshots.take`` from now on, as (owner, whether it served the batch)."""
    from evalsuite.backends.inprocess import snapshots

    served, take = [], snapshots.PromptSnapshots.take

    def counted(self, keys, keep=False):
        got = take(self, keys, keep)
        served.append((self.owner, got is not None))
        return got

    monkeypatch.setattr(snapshots.PromptSnapshots, "take", counted)
    return served


@pytest.mark.slow
@pytest.mark.parametrize("verify_weights", [True, False])
def test_a_kv_sibling_verifies_from_the_weight_only_variants_prompt_kv(tiny, tmp_path, monkeypatch, verify_weights):
    """w4g32's prefills (its verification pass, or its generation and KLD when it regenerates) keep their prompt
    K/V, and w4g32+kv4g32r8, the same weights with a quantized cache, verifies from those K/V instead of its own
    prefill: the same answers as with no K/V kept at all."""
    from evalsuite.backends.inprocess.inprocess import InProcessBackend

    if not verify_weights:
        tiny.model.set_attn_implementation("sdpa")  # not batch-invariant: --verify auto regenerates w4g32
    tasks, variants = prepared(n=4, seed=2), ("bf16", "w4g32", "w4g32+kv4g32r8")
    served = _count_takes(monkeypatch)
    kept = _rounds_run(tiny, tmp_path / "kept", variants, tasks, InProcessBackend.of(tiny, verify_bf16=False))
    assert ({r.decode for r in kept.samples("w4g32")} == {"regenerated"}) != verify_weights
    found = sum(ok for owner, ok in served if owner == "w4g32")
    assert found >= (1 if verify_weights else 2)  # the sibling's verification (after w4g32's own KLD pass)
    served.clear()
    none = _rounds_run(tiny, tmp_path / "none", variants, tasks,
                       InProcessBackend.of(tiny, verify_bf16=False, snapshot_bytes=0))
    assert not any(ok for _, ok in served)
    for v in variants:
        assert [r.output for r in kept.samples(v)] == [r.output for r in none.samples(v)]
    assert {r.decode.split("@")[0] for r in kept.samples("w4g32+kv4g32r8")} <= {"verified", "diverged"}


@pytest.mark.slow
def test_a_kv_sibling_run_after_its_weight_only_variant_is_released_still_takes_its_prompt_kv(tiny, tmp_path,
                                                                                              monkeypatch):
    """A run that takes one variant at a time releases w4g32 (and runs a KV-only variant) before
    w4g32+kv4g32r8 starts: w4g32's last prompt K/V are still there for the sibling, and the answers equal a run
    that keeps none. A different weight-only variant's K/V are never taken."""
    from evalsuite.backends.inprocess.inprocess import InProcessBackend

    tasks, served = prepared(n=4, seed=2), _count_takes(monkeypatch)
    variants = ("bf16", "w4g32", "kv4g32r8", "w4g32+kv4g32r8")
    kept = run_model(tiny, tmp_path / "kept", variants, tasks=tasks, backend=InProcessBackend.of(tiny))
    assert any(ok for owner, ok in served if owner == "w4g32")
    none = run_model(tiny, tmp_path / "none", variants, tasks=tasks,
                     backend=InProcessBackend.of(tiny, snapshot_bytes=0))
    for v in variants:
        assert [r.output for r in kept.samples(v)] == [r.output for r in none.samples(v)]
    served.clear()
    run_model(tiny, tmp_path / "other", ("bf16", "w8", "w4g32+kv4g32r8"), tasks=tasks,
              backend=InProcessBackend.of(tiny))
    assert not any(ok for owner, ok in served if owner == "w8")


@pytest.mark.slow
def test_the_baselines_side_is_computed_once_per_sample_across_variants(tokenizer, tmp_path, monkeypatch):
    """A weight-only variant's passes are batched by prompt + answer (it prefills), a KV-only one's by answer:
    the baseline's log-probs are still computed once per sample, and the answers are regeneration's."""
    from evalsuite.backends.inprocess import inprocess

    loaded, tasks, counted = fp32_tiny(tokenizer), prepared(n=8, seed=3), []
    real = inprocess.baseline_logprobs
    monkeypatch.setattr(inprocess, "baseline_logprobs",
                        lambda base, rows, refs, pad: counted.append(len(rows)) or real(base, rows, refs, pad))
    variants = ("bf16", "w4g32", "kv4g32r8", "w4g32+kv4g32r8")
    on = run_model(loaded, tmp_path / "on", variants, tasks=tasks, batch_size=3)
    assert sum(counted) == 8
    off = run_model(loaded, tmp_path / "off", variants, tasks=tasks, verify=False)
    for v in variants:
        assert {r.sample_id: r.output for r in on.samples(v)} == {r.sample_id: r.output for r in off.samples(v)}


def expire_after_first_verified_batch(backend, monkeypatch) -> None:
    """Every deadline passes once ``backend`` has verified its first batch (a window with no deadline never does)."""
    from evalsuite.run.runner import Window

    verify, expired = backend.verify, [False]

    def verify_then_expire(*args, **kw):
        for rows in verify(*args, **kw):
            expired[0] = True
            yield rows

    backend.verify = verify_then_expire
    monkeypatch.setattr(Window, "passed", lambda self: self.deadline is not None and expired[0])


def test_a_deadline_during_verification_regenerates_nothing(tokenizer, tmp_path, monkeypatch):
    """When the budget runs out while a variant's answers are being verified, the rows not verified yet wait for
    a later run: none is regenerated past the deadline (a regenerated needle row prefills its whole prompt: 86 s
    over a 9-minute budget for 9 rows, measured)."""
    import time

    from evalsuite.core.config import RunConfig
    from evalsuite.backends.inprocess.inprocess import InProcessBackend
    from evalsuite.run.runner import Runner

    loaded, tasks = fp32_tiny(tokenizer), prepared(n=8, seed=2)
    config = RunConfig(model=loaded.name, variants=["bf16", "kv4g32r8"], tasks=[t.name for t in tasks], batch_size=2)
    store = Store.create(tmp_path / "r", config.to_dict())
    backend = InProcessBackend.of(loaded, seed=config.seed, max_batch_tokens=64)
    from evalsuite.run.runner import Window

    runner = Runner(config, backend, tasks, store, progress=False, log=lambda s: None)
    expire_after_first_verified_batch(backend, monkeypatch)
    variants = backend.variants(config.variants)
    for task in tasks:
        runner.answer(variants, variants[1], task, Window(deadline=time.monotonic() + 3600.0))
    rows = store.samples("kv4g32r8")
    assert 0 < len(rows) < 8 and len(store.samples("bf16")) == 8
    assert {r.decode.split("@")[0] for r in rows} <= {"verified", "diverged"}  # nothing regenerated


def test_a_look_stops_a_variant_at_the_chunks_deadline(tokenizer, tmp_path, monkeypatch):
    """A chunk whose baseline answers are stored costs only the variants' passes: when the deadline passes during
    one, the variant stops after its batch and the next variant starts nothing (a needle chunk priced from four short
    rows took 16.6 s a pair, not 5, and ran a 9-minute budget 4.5 minutes over, measured)."""
    import time

    from evalsuite.backends.inprocess.inprocess import InProcessBackend
    from evalsuite.core.config import RunConfig
    from evalsuite.run.runner import Runner
    from evalsuite.run.schedule import Chunk

    loaded, tasks = fp32_tiny(tokenizer), prepared(n=8, seed=2)[:1]
    names = ["bf16", "kv4g32r8", "w4g32"]
    config = RunConfig(model=loaded.name, variants=names, tasks=[tasks[0].name], batch_size=2)
    store = Store.create(tmp_path / "r", config.to_dict())
    backend = InProcessBackend.of(loaded, seed=config.seed, max_batch_tokens=64)
    runner = Runner(config, backend, tasks, store, progress=False, log=lambda s: None)
    variants = backend.variants(config.variants)
    runner.look(Chunk((tasks[0].name,), upto=8), variants[:1])  # the baseline's answers, stored before the chunk
    assert len(store.samples("bf16")) == 8
    expire_after_first_verified_batch(backend, monkeypatch)
    runner.look(Chunk((tasks[0].name,), ("kv4g32r8", "w4g32"), upto=8, deadline=time.monotonic() + 3600.0),
                variants)
    assert 0 < len(store.samples("kv4g32r8")) < 8 and store.samples("w4g32") == []
