"""Stored baselines: reused when everything that changes outputs matches; refused with the field otherwise."""
from __future__ import annotations

import pytest

from evalsuite.cpu.cpuclass import host_class
from evalsuite.models.attention import NAME
from evalsuite.errors import StoreMismatch
from evalsuite.cpu.mkl import cbwr_setting
from evalsuite.models.packed import setting as linear_setting
from evalsuite.cpu.onednn import isa_setting
from evalsuite.run.baselines import BaselineSource, save_baseline
from tests.conftest import prepared, run_model
from tests.run.test_runner import ArmedCopyTask


@pytest.fixture
def pinned(tiny, tmp_path):
    """A baseline of the CopyTask stored under tmp/baselines/<fingerprint>/ (batch size 4)."""
    tasks = prepared(n=4)
    store = run_model(tiny, tmp_path / "base-run", tasks=tasks, kld=False)
    folder = save_baseline(tmp_path / "baselines", store, tasks, 1234, "bf16")
    return tmp_path / "baselines", folder, store


def _source(tiny, root, batch_size=4, strict=False, seed=1234, log=None):
    return BaselineSource(root, tiny.fingerprint, seed, batch_size, strict=strict, log=log or (lambda s: None))


def store_settings(pinned):
    return pinned[2].meta()["settings"]


def test_manifest_records_what_changes_outputs(pinned, tiny):
    import json

    _, folder, _ = pinned
    manifest = json.loads((folder / "manifest.json").read_text())
    inv = store_settings(pinned)["batch_invariant"]
    batching = {} if inv else {"batch_size": 4, "max_batch_tokens": 24576}
    assert manifest["run"] == {**batching, "backend": "in-process", "compute_dtype": "bfloat16",
                               "device": "cpu", "attention": NAME, "batch_invariant": inv,
                               "onednn_isa": isa_setting(), "mkl_cbwr": cbwr_setting(),
                               "linear": linear_setting(tiny.model), "cpu_class": host_class()}
    assert set(manifest["libraries"]) >= {"torch", "transformers", "optimum-quanto", "evalsuite"}
    assert set(manifest["tasks"]["copy"]) >= {"version", "params", "gen_settings", "seed", "sample_hashes"}


def test_manifest_from_before_device_counts_as_cpu(pinned):
    """A manifest written before the device was recorded ran on the CPU: reused there, refused on a GPU."""
    import json

    from evalsuite.run.baselines import mismatch_reason, run_key

    _, folder, store = pinned
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["run"].pop("device")
    task = prepared(n=4)[0]
    settings = store.meta()["settings"]
    assert mismatch_reason(manifest, task, 1234, run_key(4, settings)) is None
    reason = mismatch_reason(manifest, task, 1234, run_key(4, {**settings, "device": "cuda:0"}))
    assert reason == "device differs (stored 'cpu', now 'cuda:0')"


@pytest.mark.parametrize("key, before, now", [("mkl_cbwr", "default", "AUTO,STRICT"), ("linear", "plain", "packed1")])
def test_a_baseline_stored_before_a_kernel_setting_existed_is_not_mixed_with_the_new_kernels(pinned, key, before,
                                                                                            now):
    """float32 results change in their last bits with MKL's mode (``evalsuite.cpu.mkl``), bf16 prefills with packed
    Linear weights (``models.packed``): a manifest written before the setting was recorded counts as the old
    kernels, refused under the new ones."""
    import json

    from evalsuite.run.baselines import mismatch_reason, run_key

    _, folder, store = pinned
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["run"].pop(key)
    task, settings = prepared(n=4)[0], store.meta()["settings"]
    assert mismatch_reason(manifest, task, 1234, run_key(4, {**settings, key: before})) is None
    reason = mismatch_reason(manifest, task, 1234, run_key(4, {**settings, key: now}))
    assert reason == f"{key} differs (stored {before!r}, now {now!r})"


def test_matching_baseline_is_reused_not_regenerated(tiny, tmp_path, pinned):
    root, _, first = pinned
    task = ArmedCopyTask()
    store = run_model(tiny, tmp_path / "r", tasks=prepared(task, n=4), kld=False, baseline_source=_source(tiny, root))
    assert task.scored == []  # nothing was generated or scored again
    assert [r.output for r in store.samples("bf16")] == [r.output for r in first.samples("bf16")]


def test_mismatch_names_the_field_and_recomputes(tiny, tmp_path, pinned):
    root, _, _ = pinned
    logs, task = [], ArmedCopyTask()
    run_model(tiny, tmp_path / "r", tasks=prepared(task, n=4), kld=False,
              baseline_source=_source(tiny, root, seed=7, log=logs.append))
    assert any("seed differs (stored 1234, now 7)" in line for line in logs), logs
    assert len(task.scored) == 4  # generated afresh


@pytest.mark.slow
def test_batching_is_part_of_the_key_only_without_invariant_kernels(tiny, tmp_path, pinned):
    """Batch-invariant kernels: a baseline stored at batch 4 serves a run at batch 2 (it would answer the same);
    other kernels: the batch size is a mismatch."""
    import json

    from evalsuite.run.baselines import mismatch_reason, run_key

    root, folder, _ = pinned
    settings = store_settings(pinned)
    task = ArmedCopyTask()
    store = run_model(tiny, tmp_path / "r", tasks=prepared(task, n=4), batch_size=2, kld=False,
                      baseline_source=_source(tiny, root, batch_size=2))
    if settings["batch_invariant"]:
        assert task.scored == []  # reused
        fresh = run_model(tiny, tmp_path / "f", tasks=prepared(n=4), batch_size=2, kld=False)
        assert [r.output for r in store.samples("bf16")] == [r.output for r in fresh.samples("bf16")]
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["run"] = run_key(4, {**settings, "batch_invariant": False})
    reason = mismatch_reason(manifest, prepared(n=4)[0], 1234, run_key(2, {**settings, "batch_invariant": False}))
    assert reason == "batch_size differs (stored 4, now 2)"


def test_strict_mode_refuses_a_mismatch(tiny, tmp_path, pinned):
    root, _, _ = pinned
    with pytest.raises(StoreMismatch, match="seed differs"):
        run_model(tiny, tmp_path / "r", tasks=prepared(n=4), kld=False,
                  baseline_source=_source(tiny, root, seed=99, strict=True))


def test_the_decode_format_is_part_of_the_key(pinned):
    import json

    from evalsuite.run.baselines import mismatch_reason, run_key
    from evalsuite.store.records import DECODE_FORMAT

    _, folder, store = pinned
    manifest = json.loads((folder / "manifest.json").read_text())
    task, run = prepared(n=4)[0], run_key(4, store.meta()["settings"])
    assert manifest["decode_format"] == DECODE_FORMAT and mismatch_reason(manifest, task, 1234, run) is None
    manifest["decode_format"] = "ids-v0"
    assert mismatch_reason(manifest, task, 1234, run) == (f"decode format differs (stored 'ids-v0', now "
                                                          f"{DECODE_FORMAT!r})")
    manifest.pop("decode_format")  # a baseline stored before the key existed is not reused
    assert mismatch_reason(manifest, task, 1234, run).startswith("decode format differs (stored None")
    import dataclasses

    extra = prepared(n=6)[0].samples  # two samples it does not hold: generated when growing, a mismatch otherwise
    grown = dataclasses.replace(task, samples=task.samples + [s for s in extra if s.id not in
                                                                {t.id for t in task.samples}][:2])
    manifest["decode_format"] = DECODE_FORMAT
    assert mismatch_reason(manifest, grown, 1234, run, partial=True) is None
    assert "2 samples missing or changed" in mismatch_reason(manifest, grown, 1234, run)
