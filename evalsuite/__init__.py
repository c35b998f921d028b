"""evalsuite: is this quantized variant safe to release, and for whom?"""
import os
from pathlib import Path

# OpenMP threads that spin while waiting collapse torch throughput ~20x when the CPU is shared (another model,
# a llama.cpp server, a sandboxed test): measured 2.4 s vs 0.15 s per decode step on 2 busy cores.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

#: Repository root (editable install): holds tasks/, baselines/, reports/.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
