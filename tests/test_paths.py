"""Where evalsuite reads and writes (evalsuite.paths): under the working directory or $EVALSUITE_HOME, caches in the
user's cache folder, task parameter files from --task-config or ./tasks; nothing relative to the installed package."""
from __future__ import annotations

from pathlib import Path

import pytest

from evalsuite import paths

VARS = ("EVALSUITE_HOME", "EVALSUITE_RUNS", "EVALSUITE_REPORTS", "EVALSUITE_BASELINES", "EVALSUITE_CACHE",
        "XDG_CACHE_HOME", "EVALSUITE_TASK_CONFIG")


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_outputs_go_under_the_working_directory_or_evalsuite_home(clean: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert (paths.runs_root(), paths.reports_root(), paths.baselines_root()) == \
        (Path("runs"), Path("reports"), Path("baselines"))
    clean.setenv("EVALSUITE_HOME", str(tmp_path / "home"))
    assert paths.runs_root() == tmp_path / "home" / "runs" and paths.baselines_root() == tmp_path / "home" / "baselines"
    clean.setenv("EVALSUITE_REPORTS", str(tmp_path / "elsewhere"))
    assert paths.reports_root() == tmp_path / "elsewhere" and paths.runs_root() == tmp_path / "home" / "runs"


def test_the_cache_is_the_users(clean: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert paths.cache_root() == Path.home() / ".cache" / "evalsuite"
    clean.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_root() == tmp_path / "xdg" / "evalsuite"
    clean.setenv("EVALSUITE_CACHE", str(tmp_path / "mine"))
    assert paths.cache_root() == tmp_path / "mine"


def test_task_parameter_files_come_from_task_config_then_dot_tasks(clean: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert paths.task_config_dir() is None  # no ./tasks: the tasks' packaged defaults
    (tmp_path / "tasks").mkdir()
    assert paths.task_config_dir() == Path("tasks")
    clean.setenv("EVALSUITE_TASK_CONFIG", str(tmp_path / "cfg"))
    assert paths.task_config_dir() == tmp_path / "cfg"


def test_nothing_is_computed_from_the_package_location() -> None:
    """No module of the package builds a path from its own ``__file__`` (package files are read through
    importlib.resources, and nothing is written there)."""
    root = Path(paths.__file__).parent
    hits = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if "__file__" in p.read_text())
    assert hits == [], hits
