"""Stored runs re-gate as they did when they were recorded (``tests/fixtures/stored_runs.py``, issue 65): every
check's verdict, interval, n and ``more_needed``; and the gate, the report's data and ``evalsuite gate RUN`` give
the same verdicts."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from evalsuite.store.sqlite import Store
from evalsuite.gate.store_gate import gate_store
from tests.fixtures.stored_runs import EXPECTED, RUNS, snapshot

NAMES = ("fixed", "sequential", "compare")


def same(got: dict[str, Any], want: dict[str, Any]) -> None:
    """``snapshot``s equal: verdicts, n and ``more_needed`` exactly, intervals and observed values to 1e-12."""
    assert (got["overall"], got["exit_code"], got["variant_verdicts"]) == (
        want["overall"], want["exit_code"], want["variant_verdicts"])
    assert [c["key"] for c in got["checks"]] == [c["key"] for c in want["checks"]]
    for g, w in zip(got["checks"], want["checks"]):
        assert (g["key"], g["verdict"], g["n"], g["more_needed"]) == (w["key"], w["verdict"], w["n"],
                                                                      w["more_needed"])
        assert g["observed"] == pytest.approx(w["observed"], rel=1e-12, abs=1e-12), g["key"]
        assert (g["ci"] is None) == (w["ci"] is None), g["key"]
        if w["ci"] is not None:
            assert g["ci"] == pytest.approx(w["ci"], rel=1e-12, abs=1e-12), g["key"]


def report_snapshot(report: dict[str, Any]) -> dict[str, Any]:
    """``snapshot`` of a report's data (``report_model(...).to_dict()`` or its results.json)."""
    verdicts = {v["variant"]: v["verdict"] for v in report["variants"] if v["verdict"] is not None}
    return snapshot({"overall": report["overall"], "exit_code": report["exit_code"], "variant_verdicts": verdicts,
                     "checks": report["checks"]})


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    return json.loads(EXPECTED.read_text(encoding="utf-8"))


def _copy(name: str, tmp_path: Path) -> tuple[Path, Path]:
    """The stored run ``name`` copied under ``tmp_path`` (opening a store writes beside it), and its policy."""
    run_dir = tmp_path / "runs" / name
    shutil.copytree(RUNS / name / "run", run_dir)
    return run_dir, RUNS / name / "policy.yaml"


@pytest.mark.parametrize("name", NAMES)
def test_a_stored_run_regates_to_its_recorded_checks(name, expected, tmp_path):
    run_dir, policy = _copy(name, tmp_path)
    store = Store.open(run_dir)
    same(snapshot(gate_store(store, policy).gate), expected[name])
    store.close()


@pytest.mark.parametrize("name", NAMES)
def test_the_gate_the_report_and_evalsuite_gate_agree(name, expected, tmp_path, monkeypatch, capsys):
    from evalsuite.cli import main
    from evalsuite.report.build import report_model

    run_dir, policy = _copy(name, tmp_path)
    store = Store.open(run_dir)
    gated = gate_store(store, policy)
    same(report_snapshot(report_model(store, gated).to_dict()), snapshot(gated.gate))
    store.close()
    monkeypatch.setenv("EVALSUITE_REPORTS", str(tmp_path / "reports"))
    monkeypatch.setattr(sys, "argv", ["evalsuite", "gate", str(run_dir), "--policy", str(policy)])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr().out
    assert exc.value.code == expected[name]["exit_code"]
    assert f"overall: {expected[name]['overall']} (exit {expected[name]['exit_code']})" in out
    written = json.loads((tmp_path / "reports" / run_dir.name / "results.json").read_text(encoding="utf-8"))
    same(report_snapshot(written), expected[name])
