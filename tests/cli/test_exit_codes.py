"""Exit codes: 0 pass, 1 fail, 2 bad input (one line, nothing written), 3 internal error (traceback in the run
folder); policies are validated before any model loads or server is contacted."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

BLOCK_TORCH = ("import sys, importlib.abc\n"
               "class Block(importlib.abc.MetaPathFinder):\n"
               "    def find_spec(self, name, path, target=None):\n"
               "        if name.split('.')[0] in ('torch', 'transformers'):\n"
               "            raise ImportError('blocked ' + name)\n"
               "sys.meta_path.insert(0, Block())\n")


def _cli(*args, cwd, block_torch=False):
    code = (BLOCK_TORCH if block_torch else "") + "from evalsuite.cli import main\nmain()"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def stored_run(tiny, tmp_path):
    from tests.conftest import prepared, run_model

    return run_model(tiny, tmp_path / "runs" / "r1", ("bf16", "w2g32"), tasks=prepared(n=4, seed=3))


@pytest.mark.slow
def test_gate_runs_without_torch_installed(stored_run, tmp_path):
    """`evalsuite gate` on a stored run works with torch and transformers made unimportable."""
    res = _cli("gate", str(stored_run.path.parent), "--no-report", cwd=tmp_path, block_torch=True)
    assert res.returncode in (0, 1), res.stderr
    assert "overall:" in res.stdout


def test_internal_error_is_exit_3_with_traceback_in_run_folder(stored_run, tmp_path):
    with sqlite3.connect(stored_run.path) as conn:  # a store whose meta a bug (not the user) broke
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('variant_order', ?)", (json.dumps(7),))
    run_dir = stored_run.path.parent
    res = _cli("gate", str(run_dir), "--no-report", cwd=tmp_path)
    assert res.returncode == 3, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalsuite: internal error: TypeError")
    log = (run_dir / "error.log").read_text()
    assert "Traceback" in log and "TypeError" in log


@pytest.mark.slow
def test_bad_policy_is_refused_before_the_model_or_server(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("tasks: {json: {metrics: {field_accuracy: {max_dorp: 0.1}}}}\n")
    # an unreachable server would be exit 2 too, but with another message: the policy must be read first
    res = _cli("run", "--model", "openai:http://127.0.0.1:9/v1#x", "--policy", str(bad), "--tasks", "json",
               "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert res.returncode == 2 and "max_dorp" in res.stderr and "unreachable" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()
