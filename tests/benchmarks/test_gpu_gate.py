"""benchmarks/gpu/gpu_gate.py: the exit status is 0 only when every step asked for ran and passed (a step skipped for a
missing package or device fails the check; vLLM left to its default is skipped quietly where it is absent); the dry
run lists the bundle's size against the 64 MiB that may travel and the steps; the bundle's model is the embedded
GGUF cut to some layers, byte for byte; the tiny CPU mode runs end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from benchmarks.gpu import gpu_bundle, gpu_gate, gpu_steps

ROOT = Path(__file__).resolve().parents[2]
GATE_SH = ROOT / "benchmarks" / "gpu" / "gpu_gate.sh"


def test_defaults_count_every_step_but_a_vllm_nobody_asked_for():
    steps = gpu_gate.requested(Namespace(steps=None, tiny=False, vllm_python=None, no_vllm=False))
    assert list(steps) == list(gpu_gate.STEPS) and not steps["vllm"]
    assert all(counts for name, counts in steps.items() if name != "vllm")
    asked = gpu_gate.requested(Namespace(steps=None, tiny=False, vllm_python="/x/python", no_vllm=False))
    assert asked["vllm"]
    assert gpu_gate.requested(Namespace(steps="decode,vllm", tiny=False, vllm_python=None, no_vllm=False)) == \
        {"decode": True, "vllm": True}
    tiny = gpu_gate.requested(Namespace(steps=None, tiny=True, vllm_python=None, no_vllm=True))
    assert "cuda-tests" not in tiny and "refusal" not in tiny and "vllm" not in tiny
    with pytest.raises(SystemExit, match="unknown step 'gpu'"):
        gpu_gate.requested(Namespace(steps="gpu", tiny=False, vllm_python=None, no_vllm=False))


def test_the_default_steps_fit_in_eight_minutes():
    counted = gpu_gate.requested(Namespace(steps=None, tiny=False, vllm_python=None, no_vllm=False))
    assert sum(gpu_gate.STEPS[n][0] for n, c in counted.items() if c) <= 8 * 60


@pytest.mark.parametrize("argv,why", [
    (["--steps", "decode"], "no CUDA device"),  # asked for on a machine without a GPU: not run
    (["--steps", "vllm", "--vllm-python", "/no/such/python"], "vllm"),  # asked for, vLLM absent
    (["--steps", "cuda-tests"], "no model"),  # what it needs was not made
])
def test_a_step_asked_for_that_did_not_run_fails_the_check(argv, why, tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gpu_gate.main([*argv, "--work", str(tmp_path / "work")]) == 1
    table = (tmp_path / "gpu_gate.md").read_text()
    (row,) = [line for line in table.splitlines() if line.startswith(f"| {argv[1]} ")]
    assert "| skipped (" in row and why in row and "[not required]" not in row


def test_vllm_left_to_its_default_is_reported_but_does_not_fail():
    steps = [gpu_steps.Step("env", "ok"), gpu_steps.Step("vllm", "skipped", "no vLLM", required=False)]
    table = gpu_steps.summary(steps)
    assert "skipped (no vLLM) [not required]" in table


def _junit(tmp_path, cases):
    body = "".join(f'<testcase name="{name}">{inner}</testcase>' for name, inner in cases)
    path = tmp_path / "report.xml"
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite>{body}</testsuite></testsuites>')
    return path


def test_cuda_tests_fail_when_a_test_skips_for_want_of_cuda(tmp_path):
    by_design = '<skipped message="checks the refusal on a machine without CUDA"/>'
    ok = _junit(tmp_path, [("a", ""), ("b", by_design)])
    assert gpu_steps.junit_outcome(ok) == ("ok", "1 passed, 0 failed, 1 skipped")
    status, detail = gpu_steps.junit_outcome(_junit(tmp_path, [("a", ""), ("c", '<skipped message="needs CUDA"/>')]))
    assert status == "failed" and "want of CUDA: c" in detail
    assert gpu_steps.junit_outcome(_junit(tmp_path, [("b", by_design)]))[0] == "failed"  # nothing ran
    assert gpu_steps.junit_outcome(_junit(tmp_path, [("a", '<failure message="x"/>')]))[0] == "failed"
    assert gpu_steps.junit_outcome(tmp_path / "absent.xml") == ("failed", "no test report")


def _bundle(tmp_path, model_bytes):
    folder = tmp_path / "bundle"
    (folder / "wheels").mkdir(parents=True)
    (folder / "model").mkdir()
    (folder / "wheels" / "optimum_quanto-0.2.7-py3-none-any.whl").write_bytes(b"x" * 1000)
    with (folder / "model" / "m.gguf").open("wb") as f:
        f.truncate(model_bytes)  # sparse: its size is what counts
    return folder


@pytest.mark.parametrize("mib,code,word", [(40, 0, "fits"), (65, 1, "DOES NOT FIT")])
def test_the_dry_run_lists_the_bundle_against_the_limit_and_the_steps(tmp_path, mib, code, word):
    bundle = _bundle(tmp_path, mib << 20)
    proc = subprocess.run(["bash", str(GATE_SH), "--dry-run", "--bundle", str(bundle)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == code, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"model/m.gguf: {mib:.2f} MiB" in out and "wheels/: 1 wheels" in out and word in out
    for name in gpu_gate.STEPS:
        assert f"\n  {name} " in out
    assert "timeouts of the steps that count: 480 s" in out


def test_the_dry_run_without_a_bundle_says_how_to_make_one(tmp_path):
    assert gpu_gate.main(["--dry-run", "--bundle", str(tmp_path / "none")]) == 1


def test_the_bundles_model_is_the_embedded_gguf_cut_byte_for_byte(tmp_path):
    import gguf

    from evalsuite.models.embedded import embedded_gguf

    src = embedded_gguf()
    out = tmp_path / "cut.gguf"
    gpu_bundle.truncate_gguf(src, out, (0, 29))
    a, b = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(out))
    assert b.fields["llama.block_count"].contents() == 2
    assert b.fields["tokenizer.ggml.tokens"].contents() == a.fields["tokenizer.ggml.tokens"].contents()
    names = {t.name: t for t in b.tensors}
    assert {n.split(".")[1] for n in names if n.startswith("blk.")} == {"0", "1"}
    old = {t.name: t for t in a.tensors}
    assert bytes(names["blk.1.attn_q.weight"].data) == bytes(old["blk.29.attn_q.weight"].data)
    assert bytes(names["token_embd.weight"].data) == bytes(old["token_embd.weight"].data)
    assert gpu_bundle.parse_keep("0-5,28,29") == gpu_bundle.KEEP


@pytest.mark.embedded
def test_tiny_mode_gates_in_process_and_prints_the_table(tmp_path: Path) -> None:
    """The CPU mode end to end on the embedded model: stretched to a 16k window, gated in-process with its baseline
    stored, then a second run against it (its prompt K/V read back from disk), and a tiny decode table."""
    env = {**os.environ, "OUT": str(tmp_path / "out"), "WHEELS": str(tmp_path / "no-wheels"),
           "GPU_BUNDLE": str(tmp_path / "no-bundle"), "PYTHON": sys.executable}
    env.pop("EVALSUITE_HOME", None)
    steps = sum(gpu_gate.STEPS[n][0] for n in gpu_gate.TINY_STEPS if n != "vllm") * gpu_gate.TINY_TIMEOUT_SCALE
    proc = subprocess.run(["bash", str(GATE_SH), "--tiny", "--no-vllm", "--work",
                           str(tmp_path / "work")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=steps + 300)  # every step's own timeout, and the script's set-up
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    table = (tmp_path / "out" / "gpu_gate.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in table.splitlines()[2:]}
    assert set(rows) == {"env", "model", "in-process", "spill", "decode"}
    assert all("| ok" in row for row in rows.values())
    assert "kv4g32r128 " in rows["in-process"] and "kv8g32r128 " in rows["spill"]  # a verdict for each variant
    assert "prompt K/V files stored" in rows["spill"]
    assert (tmp_path / "out" / "gpu_gate.log").read_text().count("== in-process:") >= 1
    cfg = json.loads((tmp_path / "work" / "model-16k" / "config.json").read_text())
    assert cfg["max_position_embeddings"] == 16384 and cfg["rope_parameters"]["rope_type"] == "yarn"
    assert (tmp_path / "work" / "runs" / "spill").is_dir() and not (tmp_path / "runs").exists()
