"""Which Python runs vLLM: --vllm-python, $EVALSUITE_VLLM_PYTHON, this interpreter when it has vLLM,
./.venv-vllm; none of them is one line (exit 2) saying how to get one."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.backends.served.vllm.server import vllm_python


def _python(folder: Path) -> str:
    (folder / "bin").mkdir(parents=True)
    exe = folder / "bin" / "python"
    exe.write_text("#!/bin/sh\n")
    return str(exe)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with no ./.venv-vllm, no $EVALSUITE_VLLM_PYTHON, and a Python without vLLM."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVALSUITE_VLLM_PYTHON", raising=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (Path(p or ".") / "vllm").exists()])
    return tmp_path


def test_the_order(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = _python(here / ".venv-vllm")
    assert vllm_python() == str(Path(local).absolute())  # 4th: ./.venv-vllm
    fake = here / "site" / "vllm"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(here / "site"))
    assert vllm_python() == sys.executable  # 3rd: this interpreter, which has vLLM
    env = _python(here / "env")
    monkeypatch.setenv("EVALSUITE_VLLM_PYTHON", env)
    assert vllm_python() == env  # 2nd: the variable
    explicit = _python(here / "explicit")
    assert vllm_python(explicit) == explicit  # 1st: --vllm-python


def test_none_found_is_one_line(here: Path) -> None:
    with pytest.raises(EvalsuiteError) as exc:
        vllm_python()
    msg = str(exc.value)
    assert exc.value.exit_code == 2 and "\n" not in msg
    assert "--vllm-python" in msg and "pip install vllm" in msg and "make vllm" in msg
    with pytest.raises(EvalsuiteError, match="no Python at"):
        vllm_python(str(here / "missing" / "python"))
