"""``--task-config DIR``: the command reads its task parameter files there instead of ./tasks."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from evalsuite.errors import EvalsuiteError
from evalsuite.paths import TASK_CONFIG_ENV


def _run(args: list[str]) -> BaseException | None:
    from evalsuite.cli import cli

    return CliRunner().invoke(cli, ["run", "--no-gate", "-q", *args], standalone_mode=False).exception


def test_task_config_is_read_before_anything_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad file in the named folder is refused (one line naming it) before a model loads; a folder that does not
    exist is click's usage error."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(TASK_CONFIG_ENV, "")  # restored after the test: the option sets it for its command
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "reasoning.yaml").write_text("per_cel: 3\n")
    exc = _run(["--task-config", str(mine), "--tasks", "reasoning", "--limit", "1", "--out", str(tmp_path / "r")])
    assert isinstance(exc, EvalsuiteError) and exc.exit_code == 2
    assert "per_cel" in str(exc) and str(mine / "reasoning.yaml") in str(exc) and "\n" not in str(exc)
    exc = _run(["--task-config", str(tmp_path / "absent"), "--tasks", "reasoning", "--limit", "1"])
    assert exc is not None and "absent" in str(exc)


def test_task_config_does_not_outlive_its_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The option's value is passed on, not written to ``os.environ``: a later in-process command without it reads
    ./tasks, not the folder an earlier one was given."""
    import os

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(TASK_CONFIG_ENV, raising=False)
    mine, here = tmp_path / "mine", tmp_path / "tasks"
    for folder, key in ((mine, "per_cel"), (here, "per_cll")):
        folder.mkdir()
        (folder / "reasoning.yaml").write_text(f"{key}: 3\n")
    exc = _run(["--task-config", str(mine), "--tasks", "reasoning", "--limit", "1", "--out", str(tmp_path / "r")])
    assert isinstance(exc, EvalsuiteError) and "per_cel" in str(exc)
    assert TASK_CONFIG_ENV not in os.environ
    exc = _run(["--tasks", "reasoning", "--limit", "1", "--out", str(tmp_path / "r")])
    assert isinstance(exc, EvalsuiteError) and "per_cll" in str(exc) and str(here / "reasoning.yaml") in str(exc)
