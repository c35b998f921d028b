"""evalsuite: is this quantized variant safe to release, and for whom?"""
from pathlib import Path

from evalsuite.mkl import choose_cbwr
from evalsuite.threads import choose_wait_policy

# How torch's OpenMP threads wait between parallel regions, decided before torch loads (it reads the variable
# once): spinning when this machine's CPUs are idle (decode runs thousands of small regions back to back: 1.3-1.7x
# faster than sleeping), sleeping (PASSIVE) when other processes keep them busy (spinning threads then collapse
# throughput ~5x). An OMP_WAIT_POLICY or GOMP_SPINCOUNT already set is kept. ``evalsuite.threads`` says more.
choose_wait_policy()
# MKL's strict reproducibility mode: float32 matmuls whose rows do not depend on the call's shape (batch-invariant
# where MKL's own blocking is not), at no cost measured; a MKL_CBWR already set is kept. ``evalsuite.mkl`` says more.
choose_cbwr()

__version__ = "0.1.0"

#: Repository root (editable install): holds tasks/, baselines/, reports/.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
