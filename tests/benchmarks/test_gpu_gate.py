"""benchmarks/gpu_gate.sh in its tiny CPU mode: the embedded model stretched to a 16k window, gated in-process,
the vLLM step skipped, and the summary table with verdicts, times and peak memory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.embedded
def test_tiny_mode_gates_in_process_and_prints_the_table(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "WHEELS": str(tmp_path / "no-wheels"), "PYTHON": sys.executable}
    env.pop("EVALSUITE_HOME", None)
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_gate.sh"), "--tiny", "--no-vllm", "--work",
                           str(tmp_path / "work")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    table = (tmp_path / "out" / "gpu_gate.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in table.splitlines()[2:]}
    assert set(rows) == {"model", "in-process", "vllm", "cuda-tests"}
    assert "| ok" in rows["in-process"] and "kv8g32r128 " in rows["in-process"]  # a verdict for the variant
    assert "skipped (--no-vllm)" in rows["vllm"] and "skipped (no CUDA device)" in rows["cuda-tests"]
    assert (tmp_path / "out" / "gpu_gate.log").read_text().count("== in-process") == 1
    cfg = json.loads((tmp_path / "work" / "model-16k" / "config.json").read_text())
    assert cfg["max_position_embeddings"] == 16384 and cfg["rope_parameters"]["rope_type"] == "yarn"
    assert (tmp_path / "work" / "runs" / "inprocess").is_dir() and (tmp_path / "work" / "reports").is_dir()
    assert not (tmp_path / "runs").exists()
