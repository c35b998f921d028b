"""The gate/report core imports neither torch nor transformers (re-gating a stored run needs no model stack)."""
from __future__ import annotations

import subprocess
import sys

CORE = ["evalsuite.core.records", "evalsuite.core.store", "evalsuite.core.state", "evalsuite.core.decision",
        "evalsuite.gate.decide", "evalsuite.stats.compare", "evalsuite.stats.sequential",
        "evalsuite.stats.pooled", "evalsuite.gate.pooled",
        "evalsuite.gate.policy", "evalsuite.gate.verdict", "evalsuite.gate.store_gate", "evalsuite.gate.tenants",
        "evalsuite.report.build", "evalsuite.report.ablation", "evalsuite.cli.gate_cmd", "evalsuite.cli.report_cmd",
        "evalsuite.cli.tenants_cmd", "evalsuite.cli.finish"]


def test_core_imports_no_torch_or_transformers():
    code = (f"import sys\nfor m in {CORE!r}: __import__(m)\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'optimum'})\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "", f"the core pulled in {out.stdout.strip()}"
