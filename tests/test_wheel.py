"""Install anywhere: the wheel built from this source, installed into a bare folder, runs and gates a model from a
folder outside the checkout; runs and reports go under the working directory (or $EVALSUITE_HOME) and nothing is
written into the install folder."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: variables that move evalsuite's folders: unset, so the defaults are what is tested
MOVERS = ("EVALSUITE_HOME", "EVALSUITE_RUNS", "EVALSUITE_REPORTS", "EVALSUITE_BASELINES", "EVALSUITE_TASK_CONFIG")


def _build_wheel(tmp_path: Path) -> Path:
    """``pip wheel --no-deps`` on a copy of the source (the build writes build/ and egg-info beside it)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "evalsuite", src / "evalsuite", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("evalsuite-*.whl")
    return wheel


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def _evalsuite(args: list[str], cwd: Path, site: Path, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in MOVERS}
    env.update(PYTHONPATH=str(site), PYTHONPYCACHEPREFIX=str(tmp_path / "pycache"), **extra)
    return subprocess.run([sys.executable, "-m", "evalsuite", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1200)


@pytest.mark.embedded
def test_the_installed_wheel_runs_and_gates_outside_the_checkout(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "evalsuite/gate/default_policy.yaml" in names and "evalsuite/data/calibration.txt" in names
    assert "evalsuite/__main__.py" in names and not any(n.startswith("tests/") for n in names)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    before = _tree(site)
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    where = subprocess.run([sys.executable, "-c", "import evalsuite; print(evalsuite.__file__)"], cwd=work,
                           env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).parent == site / "evalsuite"  # the wheel's, not the checkout's

    run = _evalsuite(["run", "--variants", "kv8", "--tasks", "reasoning", "--limit", "8"], work, site, tmp_path)
    assert run.returncode in (0, 1), run.stdout[-2000:] + run.stderr[-2000:]  # the verdict's exit code
    (run_dir,) = (work / "runs").iterdir()
    assert (run_dir / "store.sqlite").is_file() and (work / "reports" / run_dir.name).is_dir()

    gate = _evalsuite(["gate", run_dir.name], elsewhere, site, tmp_path, EVALSUITE_HOME=str(work))
    assert gate.returncode == run.returncode, gate.stdout[-2000:] + gate.stderr[-2000:]
    assert "kv8g32r128" in gate.stdout
    assert _tree(site) == before  # nothing written where evalsuite is installed
    assert sorted(p.name for p in elsewhere.iterdir()) == []  # the gate wrote under $EVALSUITE_HOME only
