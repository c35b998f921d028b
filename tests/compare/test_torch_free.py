"""`evalsuite compare` needs no model stack: it runs with torch, transformers and lm-eval blocked from importing,
and without inspect_ai an inspect log is refused in one line naming its format."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import evalsuite.compare

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(f"evalsuite.compare.{p.stem}" for p in Path(evalsuite.compare.__file__).parent.glob("*.py")
                 if p.stem != "__init__") + ["evalsuite.cli.compare_cmd"]


def run_blocked(blocked: set[str], args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``evalsuite ARGS`` in a fresh interpreter where importing any of ``blocked`` raises ImportError."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {sorted(blocked)!r}:\n"
        "            raise ImportError(f'blocked: {name}')\n"
        "        return None\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for m in {MODULES!r}: __import__(m)\n"
        "from evalsuite.cli import main\n"
        f"sys.argv = ['evalsuite', *{args!r}]\n"
        "main()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALSUITE_RUNS": str(cwd / "runs"),
           "EVALSUITE_REPORTS": str(cwd / "reports")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=env, check=False)


def test_compare_gates_lm_eval_logs_without_torch(lm_eval_logs, tmp_path):
    done = run_blocked({"torch", "transformers", "lm_eval", "optimum"},
                       ["compare", f"bf16={lm_eval_logs['base']}", f"kv={lm_eval_logs['kv']}", "--run-id", "t"],
                       tmp_path)
    assert done.returncode in (0, 1), done.stderr
    assert "overall: " in done.stdout and (tmp_path / "reports" / "t" / "index.html").is_file()


def test_without_inspect_ai_an_inspect_log_is_one_line(tmp_path):
    for name in ("a.eval", "b.eval"):
        (tmp_path / name).write_bytes(b"")  # never opened: the format is named from the file
    done = run_blocked({"inspect_ai"}, ["compare", "a.eval", "b.eval"], tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "a.eval: an inspect_ai log (.eval); reading it needs inspect_ai, which is not installed" in done.stderr
    assert not (tmp_path / "runs").exists()
