"""MKL's strict reproducibility mode and float32 batch invariance (evalsuite.cpu.mkl)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from evalsuite.cpu import mkl


def test_strict_mode_is_set_unless_the_user_chose_a_mode() -> None:
    env: dict[str, str] = {}
    mkl.choose_cbwr(env)
    assert env == {"MKL_CBWR": mkl.STRICT} and mkl.cbwr_setting(env) == mkl.STRICT
    mine = {"MKL_CBWR": "AVX2"}
    mkl.choose_cbwr(mine)
    assert mine == {"MKL_CBWR": "AVX2"} and mkl.cbwr_setting({}) == "default"


PROBE = ("import os, torch; from evalsuite.models.invariance import probe; import evalsuite; "
         "mode = os.environ.get('MKL_CBWR'); from evalsuite.cli import process_policies; process_policies(); "
         "print(mode, os.environ.get('MKL_CBWR'), probe(torch.float32, ((576, 192), (576, 576), (576, 1536), "
         "(1536, 576), (576, 49152)), 64).ok)")


def _probe(env: dict[str, str]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True,
                         timeout=120)
    return out.stdout.split()


@pytest.mark.slow
@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="torch without MKL")
def test_the_command_line_makes_float32_matmuls_batch_invariant() -> None:
    """Importing evalsuite sets no mode; the command line's policies (``evalsuite.cli.main`` runs them before any
    matmul) set strict mode, and the float32 probe passes at SmolLM2-135M's shapes; a mode the user set is kept."""
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    assert _probe(env) == ["None", mkl.STRICT, "True"]
    assert _probe({**env, "MKL_CBWR": "AUTO"})[:2] == ["AUTO", "AUTO"]


def test_loading_a_model_chooses_strict_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_model`` sets MKL's mode before it loads (a library user's first model gets it, unless MKL ran)."""
    from evalsuite.errors import EvalsuiteError
    from evalsuite.models import load_model

    monkeypatch.delenv("MKL_CBWR", raising=False)
    with pytest.raises(EvalsuiteError):
        load_model("no/such-model-here", "auto", "cpu")  # refused after the policy, before anything loads
    assert os.environ.get("MKL_CBWR") == mkl.STRICT
