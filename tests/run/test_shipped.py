"""Shipped baselines (``run.shipped``): seeded into the working copy where the key matches, never written; a miss
names the differing field in one line and the baseline is generated."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.cpu.cpuclass import host_class
from evalsuite.errors import EvalsuiteError
from evalsuite.run.baselines import BaselineSource, save_baseline
from evalsuite.run.shipped import seed, ship
from tests.cli.test_exit_codes import _cli
from tests.conftest import prepared, run_model
from tests.run.test_runner import ArmedCopyTask


@pytest.fixture
def shipped(tiny, tmp_path):
    """A CopyTask baseline (4 samples, batch 4) built with --store-baseline's format, then shipped."""
    tasks = prepared(n=4)
    store = run_model(tiny, tmp_path / "base-run", tasks=tasks, kld=False)
    built = tmp_path / "built"
    save_baseline(built, store, tasks, 1234, "bf16")
    (built / tiny.fingerprint / "prompt_kv").mkdir()  # a working copy's prompt K/V: never shipped
    folder = ship(built, tmp_path / "shipped", model_package="tiny==1")
    return tmp_path / "shipped", folder, store.meta()["settings"]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_ship_lays_out_class_and_fingerprint_answers_and_manifest_only(shipped, tiny):
    root, folder, _ = shipped
    assert folder == root / host_class() / tiny.fingerprint
    assert sorted(p.name for p in folder.iterdir()) == ["copy.jsonl", "manifest.json"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["model_package"] == "tiny==1" and manifest["run"]["cpu_class"] == host_class()


def test_a_build_without_a_cpu_class_does_not_ship(shipped, tmp_path, tiny):
    root, folder, _ = shipped
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["run"]["cpu_class"]
    built = tmp_path / "old" / tiny.fingerprint
    built.mkdir(parents=True)
    (built / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(EvalsuiteError, match="records no cpu_class"):
        ship(tmp_path / "old", tmp_path / "out")


def test_matching_shipped_answers_seed_the_working_copy_and_are_not_generated_again(shipped, tiny, tmp_path):
    root, _, settings = shipped
    before, logs, work = _files(root), [], tmp_path / "work"
    task = ArmedCopyTask()
    tasks = prepared(task, n=4)
    assert seed(root, work, tiny.fingerprint, tasks, 1234, 4, settings, log=logs.append) == {"copy": 4}
    assert len(logs) == 1 and "copy 4 answers" in logs[0]
    source = BaselineSource(work, tiny.fingerprint, 1234, 4, log=logs.append, grow=True)
    run_model(tiny, tmp_path / "r", tasks=tasks, kld=False, baseline_source=source)
    assert task.scored == []  # the baseline answered nothing: every answer came from the shipped folder
    assert _files(root) == before  # only read


@pytest.mark.parametrize("field, change, named", [
    ("cpu_class", "GenuineIntel_aten-AVX512_mkl-avx512", "cpu_class differs"),
    ("mkl_cbwr", "AVX2,STRICT", "mkl_cbwr differs"),
    ("seed", 7, "seed differs (stored 1234, now 7)"),
])
def test_a_changed_key_field_is_named_in_one_line_and_the_baseline_is_generated(shipped, tiny, tmp_path, field,
                                                                                  change, named):
    root, _, settings = shipped
    before, logs, work = _files(root), [], tmp_path / "work"
    task = ArmedCopyTask()
    tasks = prepared(task, n=4)
    seed_ = change if field == "seed" else 1234
    now = settings if field == "seed" else {**settings, field: change}
    assert seed(root, work, tiny.fingerprint, tasks, seed_, 4, now, log=logs.append) == {}
    assert len(logs) == 1 and named in logs[0] and logs[0].endswith("the baseline is generated"), logs
    run_model(tiny, tmp_path / "r", tasks=tasks, kld=False, seed=seed_,
              baseline_source=BaselineSource(work, tiny.fingerprint, seed_, 4, log=logs.append, grow=True))
    assert len(task.scored) == 4  # generated
    assert _files(root) == before


def test_a_working_copy_that_grew_past_the_shipped_one_is_kept(shipped, tiny, tmp_path):
    root, _, settings = shipped
    work = tmp_path / "work"
    tasks = prepared(n=4)
    seed(root, work, tiny.fingerprint, tasks, 1234, 4, settings, log=lambda s: None)
    path = work / tiny.fingerprint / "copy.jsonl"
    path.write_text(path.read_text() + path.read_text().splitlines()[0] + "\n")  # stands for a grown copy
    grown = path.read_text()
    assert seed(root, work, tiny.fingerprint, tasks, 1234, 4, settings, log=lambda s: None) == {}
    assert path.read_text() == grown


@pytest.mark.slow
def test_cli_refuses_a_shipped_baseline_without_a_working_copy(tmp_path: Path):
    res = _cli("run", "--shipped-baseline", str(tmp_path), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert res.returncode == 2 and "give --store-baseline" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()
