"""Where evalsuite reads and writes: nothing is computed from where the package is installed.

* **Home** (``home``): ``$EVALSUITE_HOME`` when set, else the working directory. Runs, reports and stored
  baselines go under it (``runs/``, ``reports/``, ``baselines/``); ``$EVALSUITE_RUNS``, ``$EVALSUITE_REPORTS`` and
  ``$EVALSUITE_BASELINES`` each move one of them.
* **Cache** (``cache_root``): ``$EVALSUITE_CACHE`` when set, else ``$XDG_CACHE_HOME/evalsuite``, else
  ``~/.cache/evalsuite``: converted models (``models.embedded``) and anything else that can be rebuilt.
* **Task parameter files** (``task_config_dir``): ``--task-config DIR`` (``$EVALSUITE_TASK_CONFIG``), else
  ``./tasks`` when that folder exists, else none: each task's defaults, which ship in the package.
* The default gate policy and the calibration text are package data (``importlib.resources``), read, never written.

A library user who calls nothing here gets nothing written: these are functions, read at the moment of use.
"""
from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "EVALSUITE_HOME"
CACHE_ENV = "EVALSUITE_CACHE"
TASK_CONFIG_ENV = "EVALSUITE_TASK_CONFIG"

#: Each folder's default as the command-line help states it (docs/cli.md is generated from that help).
HOME_HELP = "<home>: $EVALSUITE_HOME, else the working directory"
RUNS_HELP = f"$EVALSUITE_RUNS, else <home>/runs; {HOME_HELP}"
REPORTS_HELP = f"$EVALSUITE_REPORTS, else <home>/reports; {HOME_HELP}"
BASELINES_HELP = f"$EVALSUITE_BASELINES, else <home>/baselines; {HOME_HELP}"


def home() -> Path:
    """The folder runs, reports and baselines live under: ``$EVALSUITE_HOME``, else the working directory (as the
    relative ``Path()``, so that printed paths stay short)."""
    value = os.environ.get(HOME_ENV)
    return Path(value).expanduser() if value else Path()


def _under_home(env: str, name: str) -> Path:
    value = os.environ.get(env)
    return Path(value).expanduser() if value else home() / name


def runs_root() -> Path:
    """Where run folders live: ``$EVALSUITE_RUNS``, else ``<home>/runs``."""
    return _under_home("EVALSUITE_RUNS", "runs")


def reports_root() -> Path:
    """Where reports are written: ``$EVALSUITE_REPORTS``, else ``<home>/reports``."""
    return _under_home("EVALSUITE_REPORTS", "reports")


def baselines_root() -> Path:
    """Stored baselines: ``$EVALSUITE_BASELINES``, else ``<home>/baselines``."""
    return _under_home("EVALSUITE_BASELINES", "baselines")


def cache_root() -> Path:
    """Rebuildable files (converted models): ``$EVALSUITE_CACHE``, else ``$XDG_CACHE_HOME/evalsuite``, else
    ``~/.cache/evalsuite``."""
    value = os.environ.get(CACHE_ENV)
    if value:
        return Path(value).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "evalsuite"


def task_config_dir() -> Path | None:
    """The folder of per-task parameter files (``<task>.yaml``): ``$EVALSUITE_TASK_CONFIG`` (what ``--task-config
    DIR`` sets), else ``./tasks`` when it is a folder, else None (every task at its packaged defaults)."""
    value = os.environ.get(TASK_CONFIG_ENV)
    if value:
        return Path(value).expanduser()
    local = Path("tasks")
    return local if local.is_dir() else None
