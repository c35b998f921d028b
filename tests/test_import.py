"""Importing evalsuite changes nothing in the process: no environment variable, no look at the machine's load
(``/proc/stat``), no matplotlib backend. The process-wide choices are the command line's (``evalsuite.cli.main``)
and ``load_model``'s."""
from __future__ import annotations

import json
import os
import subprocess
import sys

#: run in a fresh interpreter: every file opened is recorded, the environment compared before and after
SPY = """
import builtins, io, json, os
opened = []
_open = builtins.open
def spy(file, *a, **k):
    opened.append(str(file))
    return _open(file, *a, **k)
builtins.open = io.open = spy
{prelude}
before = dict(os.environ)
{body}
after = dict(os.environ)
changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
print(json.dumps({{"changed": changed, "proc_stat": "/proc/stat" in opened}}))
"""


def _spy(body: str, prelude: str = "") -> dict:
    """Run ``body`` in a process whose environment holds none of the variables evalsuite may choose."""
    code = SPY.format(prelude=prelude, body=body)
    env = {k: v for k, v in os.environ.items() if k not in ("MKL_CBWR", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True,
                         env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_evalsuite_leaves_the_environment_unchanged() -> None:
    got = _spy("import evalsuite, evalsuite.cli, evalsuite.paths, evalsuite.cpu.threads, evalsuite.cpu.mkl")
    assert got == {"changed": [], "proc_stat": False}


def test_no_evalsuite_module_sets_a_variable_on_import() -> None:
    """Every module, after the libraries evalsuite builds on are imported (lm-eval sets HF_XET_HIGH_PERFORMANCE on
    its own import: that is lm-eval's, not evalsuite's)."""
    body = ("import importlib, pkgutil, evalsuite\n"
            "for m in pkgutil.walk_packages(evalsuite.__path__, 'evalsuite.'):\n"
            "    if not m.name.endswith('__main__'):\n"
            "        importlib.import_module(m.name)")
    got = _spy(body, prelude="import torch, transformers, lm_eval, datasets")
    assert got == {"changed": [], "proc_stat": False}


def test_the_command_line_chooses_the_process_policies() -> None:
    """``evalsuite.cli.main`` sets MKL's strict mode and decides the OpenMP wait policy (watching /proc/stat)."""
    body = ("import sys\n"
            "from evalsuite.cli import main\n"
            "sys.argv = ['evalsuite', '--version']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass")
    got = _spy(body)
    assert "MKL_CBWR" in got["changed"] and got["proc_stat"] is True


#: a notebook has chosen its backend; evalsuite is imported (every module), then draws a report and a sensitivity plot
PLOTS = """
import importlib, json, pkgutil, tempfile
from pathlib import Path
import matplotlib
matplotlib.use("svg")
import evalsuite
for m in pkgutil.walk_packages(evalsuite.__path__, "evalsuite."):
    if not m.name.endswith("__main__"):
        importlib.import_module(m.name)
imported = matplotlib.get_backend()
from evalsuite.report.html import render_html
from evalsuite.sensitivity.measure import Sensitivity, UnitResult
from evalsuite.sensitivity.report import plot
from tests.report.test_report_render import crafted_report
page = render_html(crafted_report())
png = plot(Path(tempfile.mkdtemp()), Sensitivity([UnitResult("weights", "l0", 0, 0.1, 0.9, 10)]), "w4g64")
print(json.dumps({"imported": imported, "rendered": matplotlib.get_backend(), "pngs": page.count("data:image/png"),
                  "plot": png.read_bytes()[:4].hex()}))
"""


def test_the_matplotlib_backend_stays_the_users() -> None:
    """Figures are drawn on their own Agg canvas (``report.plots``): importing evalsuite and rendering a report
    (its needle heatmaps and forest plot) and a sensitivity plot leave the backend a notebook chose."""
    from pathlib import Path

    out = subprocess.run([sys.executable, "-c", PLOTS], capture_output=True, text=True, timeout=300, check=True,
                         cwd=Path(__file__).parents[1])
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"imported": "svg", "rendered": "svg", "pngs": got["pngs"], "plot": "89504e47"} and got["pngs"] >= 2
