"""``--device`` on the command line: refused before anything loads (exit 2, one line, no run folder); ``cpu`` is
what the default does on a CPU machine; ``--resume`` keeps the stored device unless ``--device`` is given."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from evalsuite.errors import EvalsuiteError

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")


@pytest.mark.slow
@no_cuda
def test_run_on_a_missing_gpu_exits_2_with_one_line_and_no_run_folder(tmp_path):
    res = subprocess.run([sys.executable, "-c", "from evalsuite.cli import main; main()", "run", "--device",
                          "cuda:0", "--tasks", "json", "--limit", "1", "--out", str(tmp_path / "runs")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "cuda:0" in lines[0] and "CUDA is not available" in lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["smoke", "ablate", "baseline", "sensitivity"])
def test_other_commands_refuse_a_bad_device_before_loading(command, tmp_path, monkeypatch):
    from evalsuite.cli import cli

    monkeypatch.setenv("EVALSUITE_RUNS", str(tmp_path / "runs"))
    extra = {"ablate": ["--sweep", "w4g{32,64}"], "sensitivity": ["--variant", "w4g64"]}.get(command, [])
    res = CliRunner().invoke(cli, [command, "--model", str(tmp_path / "no-such-model"), "--device", "tpu", *extra],
                             standalone_mode=False)
    assert isinstance(res.exception, EvalsuiteError) and "bad --device 'tpu'" in str(res.exception)
    assert not (tmp_path / "runs").exists()


def test_export_lm_eval_checks_the_spelling_only(tmp_path):
    pytest.importorskip("lm_eval")  # absent on the GPU check's machine (benchmarks/gpu/cuda_tests.txt)
    from evalsuite.cli import cli

    res = CliRunner().invoke(cli, ["export-lm-eval", "json", str(tmp_path / "x"), "--device", "gpu0"],
                             standalone_mode=False)
    assert isinstance(res.exception, EvalsuiteError) and not (tmp_path / "x").exists()


@pytest.fixture
def tiny_folder(tiny, tmp_path):
    folder = tmp_path / "tiny-model"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    return folder


def _run(folder, out, run_id, *extra):
    from evalsuite.cli.run_cmd import run

    args = ["--model", str(folder), "--dtype", "bfloat16", "--tasks", "json", "--param", "json.max_new_tokens=6",
            "--limit", "2", "--variants", "bf16,kv4g32", "--batch-size", "2", "--no-gate", "--quiet",
            "--out", str(out), *extra]
    if run_id:
        args += ["--run-id", run_id]
    return CliRunner().invoke(run, args, standalone_mode=False)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the default is the CPU only where CUDA is absent")
def test_device_cpu_stores_what_the_default_stores_and_resume_keeps_it(tiny_folder, tmp_path, monkeypatch):
    from evalsuite.store.sqlite import Store

    monkeypatch.setenv("EVALSUITE_BASELINES", str(tmp_path / "no-baselines"))
    out = tmp_path / "runs"
    for run_id, extra in (("default", ()), ("cpu", ("--device", "cpu"))):
        res = _run(tiny_folder, out, run_id, *extra)
        assert res.exception is None, res.output
    a, b = Store.open(out / "default"), Store.open(out / "cpu")
    assert a.config["device"] == "auto" and b.config["device"] == "cpu"
    assert a.meta()["settings"]["device"] == b.meta()["settings"]["device"] == "cpu"
    base, kv = a.variants_present()
    assert b.variants_present() == [base, kv] and kv.startswith("kv4g32")
    for variant in (base, kv):
        rows_a, rows_b = a.samples(variant, "json"), b.samples(variant, "json")
        assert len(rows_a) == 2 and [r.outputs for r in rows_a] == [r.outputs for r in rows_b]
    assert len(a.kld(kv)) == 2
    assert [(k.sample_id, k.token_kld) for k in a.kld(kv)] == [(k.sample_id, k.token_kld) for k in b.kld(kv)]
    # --resume uses the stored device: one this machine lacks is refused; --device overrides it
    config = b.config
    b.set_meta({"config": {**config, "device": "cuda:7"}})
    b.close()
    res = _run(tiny_folder, out, None, "--resume", "cpu")
    assert isinstance(res.exception, EvalsuiteError) and "cuda:7" in str(res.exception)
    res = _run(tiny_folder, out, None, "--resume", "cpu", "--device", "cpu")
    assert res.exception is None, res.output
