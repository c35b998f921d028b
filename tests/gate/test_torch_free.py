"""The gate/report core imports neither torch nor transformers (re-gating a stored run needs no model stack), and
neither does any module whose docstring says it is torch-free: the planner, the variant grammar, the KV bytes
formula, device parsing, where files go, and the vLLM engine's server sizing."""
from __future__ import annotations

import subprocess
import sys

CORE = ["evalsuite.store.records", "evalsuite.store.sqlite", "evalsuite.store.state", "evalsuite.core.decision",
        "evalsuite.gate.decide", "evalsuite.stats.slices", "evalsuite.stats.sequential",
        "evalsuite.stats.pooled", "evalsuite.gate.pooled",
        "evalsuite.gate.policy", "evalsuite.gate.verdict", "evalsuite.gate.store_gate", "evalsuite.tenants.decide",
        "evalsuite.tenants.run", "evalsuite.tenants.spec", "evalsuite.capacity.serve",
        "evalsuite.report.build", "evalsuite.report.ablation", "evalsuite.cli.gate_cmd", "evalsuite.cli.report_cmd",
        "evalsuite.cli.tenants_cmd", "evalsuite.cli.finish"]
#: modules that say they need no torch (plan/: ``evalsuite plan`` reads a config.json; the grammar parses specs)
TORCH_FREE = ["evalsuite.capacity", "evalsuite.capacity.bytes", "evalsuite.capacity.capacity",
              "evalsuite.capacity.render", "evalsuite.capacity.shape", "evalsuite.cli.plan_cmd",
              "evalsuite.variants.grammar", "evalsuite.variants.quant_grammar", "evalsuite.variants.forms",
              "evalsuite.variants.mixed", "evalsuite.kvcache.config", "evalsuite.kvcache.bytes",
              "evalsuite.models.device", "evalsuite.models.embedded", "evalsuite.paths", "evalsuite.cpu.threads",
              "evalsuite.cpu.mkl", "evalsuite.backends.served.vllm.sizes", "evalsuite.backends.served.vllm.memory",
              "evalsuite.backends.served.vllm.cli", "evalsuite.cpu.machine"]


def _heavy(modules: list[str]) -> str:
    """The heavy libraries a fresh interpreter holds after importing ``modules``."""
    code = (f"import sys\nfor m in {modules!r}: __import__(m)\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'optimum'})\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip()


def test_core_imports_no_torch_or_transformers():
    assert _heavy(CORE) == "", "the core pulled in torch or transformers"


def test_modules_that_say_torch_free_are():
    assert _heavy(TORCH_FREE) == "", "a torch-free module pulled in torch or transformers"
