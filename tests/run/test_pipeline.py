"""Store -> gate -> report, and the CLI's exit codes on stored runs (no model needed after the run)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from evalsuite.gate.store_gate import gate_store
from evalsuite.report.build import write_report
from tests.conftest import prepared, run_model


@pytest.fixture
def stored_run(tiny, tmp_path):
    variants = ["bf16", {"name": "noop", "spec": "bf16"}, "w2g32"]
    return run_model(tiny, tmp_path / "runs" / "r1", variants, tasks=prepared(n=12, seed=3))


@pytest.mark.slow
def test_noop_variant_has_no_flips_and_zero_kld(stored_run):
    gated = gate_store(stored_run)
    noop = [s for s in gated.stats if s.variant == "noop" and s.slice == "all"][0]
    assert noop.flips_right_to_wrong == noop.flips_wrong_to_right == 0 and noop.delta == 0
    assert noop.kld_mean == 0 and noop.top1_agreement == 1 and noop.agreement == 1
    # 12 identical pairs cannot show a drop above max_drop is ruled out (the interval stays honest at small n):
    # INCONCLUSIVE, with an estimate of the samples that would decide it; never FAIL
    assert gated.gate.variant_verdicts["noop"] == "INCONCLUSIVE"
    drop = [c for c in gated.gate.checks if c.variant == "noop" and c.check == "max_drop" and c.slice == "all"][0]
    assert drop.n == 12 and drop.more_needed is not None and drop.more_needed > 0
    w2 = [s for s in gated.stats if s.variant == "w2g32" and s.slice == "all"][0]
    assert w2.kld_mean > 1e-3 and w2.top1_agreement <= 1


@pytest.mark.slow
def test_report_files_are_written(stored_run, tmp_path):
    gated = gate_store(stored_run)
    out = write_report(stored_run, gated, tmp_path / "reports")
    assert {p.name for p in out.iterdir()} == {"index.html", "summary.md", "results.json", "junit.xml"}
    results = json.loads((out / "results.json").read_text())
    assert results["schema_version"] == 2 and results["baseline"] == "bf16" and results["policy"]["defaults"]
    assert {v["variant"] for v in results["variants"]} == {"bf16", "noop", "w2g32"}
    assert results["overall"] == gated.gate.overall
    assert not list((tmp_path / "reports").glob(".*")), "no temporary folder left behind"


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-c", "from evalsuite.cli import main; main()", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_cli_gate_exit_codes(stored_run, tmp_path):
    run_dir = str(stored_run.path.parent)
    strict = tmp_path / "strict.yaml"
    strict.write_text("defaults: {max_drop: 0.0, max_kld: 0.000001, min_samples: 1}\n")
    res = _cli("gate", run_dir, "--policy", str(strict), cwd=tmp_path)
    assert res.returncode == 1, res.stderr  # w2g32 has KLD > 0
    assert "FAIL" in res.stdout and "report:" in res.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults: {max_dorp: 0.1}\n")
    res = _cli("gate", run_dir, "--policy", str(bad), cwd=tmp_path)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "max_dorp" in res.stderr
    res = _cli("gate", "no-such-run", cwd=tmp_path)
    assert res.returncode == 2 and "not found" in res.stderr


@pytest.mark.slow
def test_cli_bad_input_writes_nothing(tmp_path):
    res = _cli("run", "--variants", "bf16,w3", "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert res.returncode == 2 and "valid forms" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = _cli("run", "--tasks", "neddle", "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert res.returncode == 2 and "did you mean needle" in res.stderr
    assert not (tmp_path / "runs").exists()
