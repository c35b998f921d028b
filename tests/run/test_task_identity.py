"""Task parameter files are part of a run's identity: the run records every task's resolved parameters and where
each came from; a continuation (``--resume``, ``--accumulate``) whose tasks resolve otherwise is refused in one line
naming the task and the parameter, before the model loads; and every config field a resume may change is
validated after the change."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalsuite.core.config import RESUMABLE, RunConfig
from evalsuite.store.sqlite import Store
from evalsuite.backends.inprocess.inprocess import InProcessBackend
from evalsuite.errors import EvalsuiteError, StoreMismatch
from evalsuite.run.pipeline import execute
from evalsuite.tasks.registry import Registry
from tests.toytask import CopyTask


class Loader:
    """The tiny model, counting how often its weights are asked for (the tokenizer comes alone)."""

    def __init__(self, loaded: Any) -> None:
        self.loaded, self.loads = loaded, 0

    def __call__(self) -> Any:
        self.loads += 1
        return self.loaded

    def tokenizer(self) -> Any:
        return self.loaded.tokenizer


def _registry() -> Registry:
    reg = Registry()
    reg.register("copy", CopyTask)
    return reg


def go(tiny: Any, run_dir: Path, resume: bool, **config: Any) -> Loader:
    loader = Loader(tiny)
    execute(RunConfig(model="tiny", variants=["bf16"], tasks=["copy"], batch_size=4, kld=False, **config), run_dir,
            resume, InProcessBackend(loader=loader, seed=1234), progress=False, log=lambda s: None,
            registry=_registry())
    return loader


def refused(tiny: Any, run_dir: Path, **config: Any) -> str:
    loader = Loader(tiny)
    with pytest.raises(StoreMismatch) as exc:
        execute(RunConfig(model="tiny", variants=["bf16"], tasks=["copy"], batch_size=4, kld=False, **config),
                run_dir, True, InProcessBackend(loader=loader, seed=1234), progress=False, log=lambda s: None,
                registry=_registry())
    assert loader.loads == 0 and exc.value.exit_code == 2 and "\n" not in str(exc.value)  # before the model loads
    return str(exc.value)


def test_a_task_file_edited_between_two_invocations_is_refused(tiny: Any, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVALSUITE_TASK_CONFIG", raising=False)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "copy.yaml").write_text("n: 3\n")
    go(tiny, tmp_path / "run", False)
    state = Store.open(tmp_path / "run").state()
    assert state.task_params["copy"]["n"] == 3 and state.task_params["copy"]["max_new_tokens"] == 6
    assert state.task_sources["copy"] == {"n": f"task file {tmp_path / 'tasks' / 'copy.yaml'}",
                                          "max_new_tokens": "default", "stop_at_newline": "default"}
    go(tiny, tmp_path / "run", True)  # unchanged: it continues
    (tmp_path / "tasks" / "copy.yaml").write_text("n: 4\n")
    msg = refused(tiny, tmp_path / "run")
    assert msg.startswith("task 'copy' parameter 'n' changed since the run started: 3 (task file ") and \
        "4 (task file " in msg
    go(tiny, tmp_path / "run", True, task_params={"copy": {"n": 3}})  # the same value, from --param: the same run


def test_a_resume_from_another_working_folder(tiny: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The files are read where the command runs: another folder without them is refused (naming the default it
    would take), one with the same values continues; ``--task-config`` is recorded as the run's folder."""
    monkeypatch.delenv("EVALSUITE_TASK_CONFIG", raising=False)
    for name, text in (("a", "n: 3\n"), ("same", "n: 3\nmax_new_tokens: 6\n")):
        (tmp_path / name / "tasks").mkdir(parents=True)
        (tmp_path / name / "tasks" / "copy.yaml").write_text(text)
    (tmp_path / "bare").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    go(tiny, tmp_path / "run", False)
    monkeypatch.chdir(tmp_path / "bare")
    msg = refused(tiny, tmp_path / "run")
    assert "parameter 'n' changed" in msg and "6 (default) now" in msg
    monkeypatch.chdir(tmp_path / "same")
    go(tiny, tmp_path / "run", True)
    go(tiny, tmp_path / "mine", False, task_config=str(tmp_path / "a" / "tasks"))  # named: read from anywhere
    monkeypatch.chdir(tmp_path / "bare")
    stored = RunConfig.from_dict(Store.open(tmp_path / "mine").config)
    go(tiny, tmp_path / "mine", True, task_config=stored.task_config)


def test_a_store_from_before_the_sources_were_recorded_still_resumes(tiny: Any, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """State version 1 kept the resolved parameters without where they came from: they are compared alone."""
    import sqlite3

    monkeypatch.chdir(tmp_path)
    go(tiny, tmp_path / "run", False)
    with sqlite3.connect(tmp_path / "run" / Store.FILENAME) as conn:
        conn.execute("DELETE FROM meta WHERE key='task_sources'")
        conn.execute("UPDATE meta SET value='1' WHERE key='state_version'")
    assert Store.open(tmp_path / "run").state().task_sources == {}
    msg = refused(tiny, tmp_path / "run", task_params={"copy": {"max_new_tokens": 5}})
    assert "parameter 'max_new_tokens' changed since the run started: 6 (source not recorded) then, 5 (--param)" \
        in msg
    go(tiny, tmp_path / "run", True)  # the same values: it continues, and records where they come from now
    assert Store.open(tmp_path / "run").state().task_sources["copy"]["n"] == "default"


def _cli(args: list[str]) -> Any:
    from evalsuite.cli import cli

    return CliRunner().invoke(cli, args, standalone_mode=False, catch_exceptions=True)


def _limited_run(tmp_path: Path, **kw: Any) -> Path:
    """A stored run of ``--limit 4`` that has not started (what a resume reads first)."""
    run_dir = tmp_path / "runs" / "r"
    Store.create(run_dir, RunConfig(tasks=["reasoning"], variants=["bf16"], limit=4, **kw).to_dict()).close()
    return run_dir


@pytest.mark.parametrize("args, says", [
    (["--budget", "10m"], "--limit (a fixed set) and --budget (sequential rounds) exclude each other"),
    (["--max-samples", "40"], "--limit (a fixed set) and --max-samples (sequential rounds) exclude each other"),
    (["--device", "cuda:7"], "cuda:7"),
])
def test_every_field_a_resume_changes_is_validated(tmp_path: Path, args: list[str], says: str) -> None:
    """``RESUMABLE``: device, budget, cap (and the task folder, compared by its values above). An
    ``--accumulate`` continuation changes only the budget, the cap (both outside its folder's key, with the rest of
    the config validated when the command built it) and the device (checked by the command)."""
    assert set(RESUMABLE) == {"device", "budget_s", "max_samples", "task_config"}
    _limited_run(tmp_path)
    res = _cli(["run", "--resume", "r", "--out", str(tmp_path / "runs"), "--no-gate", "-q", *args])
    assert isinstance(res.exception, EvalsuiteError) and res.exception.exit_code == 2, res.output
    assert says in str(res.exception) and "\n" not in str(res.exception)
    with pytest.raises(TypeError, match="a resume cannot change seed"):
        RunConfig().resumed_with(seed=7)


@pytest.mark.embedded
def test_the_command_line_refuses_an_edited_task_file_on_resume_and_accumulate(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """As the issue measured it: a run, then an edit of tasks/reasoning.yaml in the working folder, then --resume
    (and an --accumulate continuation): exit 2, one line naming the task and the parameter; from another folder
    without the file too; from one with the same file it continues."""
    monkeypatch.delenv("EVALSUITE_TASK_CONFIG", raising=False)
    work, other, same = (tmp_path / n for n in ("work", "other", "same"))
    for folder in (work / "tasks", other, same / "tasks"):
        folder.mkdir(parents=True)
    for folder in (work, same):
        (folder / "tasks" / "reasoning.yaml").write_text("per_cell: 1\n")
    runs = str(tmp_path / "runs")
    monkeypatch.chdir(work)
    first = _cli(["run", "--accumulate", "--tasks", "reasoning", "--variants", "bf16", "--limit", "1", "--out", runs,
                  "--no-gate", "-q"])
    assert first.exception is None, first.output
    (acc,) = Path(runs).iterdir()
    assert json.loads(json.dumps(Store.open(acc).state().task_params))["reasoning"]["per_cell"] == 1
    (work / "tasks" / "reasoning.yaml").write_text("per_cell: 2\n")
    for args in (["--resume", acc.name], ["--accumulate", "--tasks", "reasoning", "--variants", "bf16", "--limit", "1"]):
        res = _cli(["run", *args, "--out", runs, "--no-gate", "-q"])
        assert isinstance(res.exception, StoreMismatch) and res.exception.exit_code == 2, res.output
        assert str(res.exception).startswith("task 'reasoning' parameter 'per_cell' changed since the run started: "
                                             "1 (task file ") and "\n" not in str(res.exception)
    monkeypatch.chdir(other)
    res = _cli(["run", "--resume", acc.name, "--out", runs, "--no-gate", "-q"])
    assert isinstance(res.exception, StoreMismatch) and "'per_cell'" in str(res.exception) and \
        "8 (default) now" in str(res.exception)
    monkeypatch.chdir(same)
    assert _cli(["run", "--resume", acc.name, "--out", runs, "--no-gate", "-q"]).exception is None
