"""MKL's strict reproducibility mode, which makes float32 matmuls batch-invariant where MKL's own choice is not.

torch multiplies float32 matrices on the CPU through MKL's GEMM, which picks its blocking (and so the order in which
a row's sums are added) by the call's shape and the CPU. On a 2-core Xeon with AMX (torch 2.13) SmolLM2-135M's
1,536 -> 576 projection computes rows 1-15 and 57-81+ of a call differently from the same rows in a call of another
size, so ``models.invariance.probe`` fails in float32 there, verification falls back to near-tie margins and a
quantized KV cache's greedy answers change with their batch (verified = regenerated on 69-97% of samples for KV
variants, regeneration at batch 8 = at 16 about as often: docs/verification.md).

MKL's Conditional Numerical Reproducibility in strict mode (``MKL_CBWR=AUTO,STRICT``) fixes the order of every
reduction whatever the threads and the shape: the probe passes on that machine, and float32 GEMMs are about as fast
(``benchmarks/cpu/mkl_cbwr.py``, 3 alternating rounds: 2,048 x 576 x 1,536 at 348 GFLOP/s strict against 356 default,
0.98x; a 16-row call 152 us against 176 us).

Who sets it: the command line (``evalsuite.cli.main``) first thing, and ``models.load_model`` before it loads a
model (MKL reads the variable at its first call, so before torch multiplies anything), unless the user set
``MKL_CBWR``. Importing evalsuite does not. A library user whose process already ran a float32 matmul before
loading a model through evalsuite keeps MKL's default mode (MKL read the variable then); the batch-invariance probe
still decides what verification may assume (``models.invariance``). It changes float32 results in their last bits,
never bf16 Linear layers (oneDNN's, see ``evalsuite.cpu.onednn``). Where MKL is absent, the probe decides alone.
The mode in force is part of a run's settings and of a stored baseline's key (``cbwr_setting``).
"""
from __future__ import annotations

import os
from collections.abc import MutableMapping

STRICT = "AUTO,STRICT"  #: MKL's own code path for this CPU, with a fixed reduction order
VARIABLE = "MKL_CBWR"


def choose_cbwr(env: MutableMapping[str, str] | None = None) -> None:
    """Set ``MKL_CBWR`` to ``STRICT`` unless it is set already (the user's value is kept)."""
    env = os.environ if env is None else env
    env.setdefault(VARIABLE, STRICT)


def cbwr_setting(env: MutableMapping[str, str] | None = None) -> str:
    """The MKL reproducibility mode this process runs with, for a run's settings: the variable's value, or
    "default"."""
    env = os.environ if env is None else env
    return env.get(VARIABLE, "default")
