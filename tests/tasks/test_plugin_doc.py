"""The task plugin of docs/tasks.md, taken from the page as written: its pyproject's entry point and its package,
installed as a distribution on sys.path, are discovered by the registry, listed by `evalsuite tasks`, and run."""
from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalsuite.tasks import Sample, Score, default_registry
from evalsuite.tasks.registry import ENTRY_POINT_GROUP
from evalsuite.tasks.stream import take

PAGE = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"


def blocks(lang: str) -> list[str]:
    """The page's fenced blocks of one language."""
    return re.findall(rf"```{lang}\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The page's plugin as an installed distribution: its package and a dist-info whose entry points are the
    page's pyproject ``[project.entry-points]`` tables."""
    (pyproject,) = blocks("toml")
    project = tomllib.loads(pyproject)["project"]
    groups = project["entry-points"]
    (code,) = [b for b in blocks("python") if "class UnitsTask" in b]
    module, _, _ = groups[ENTRY_POINT_GROUP]["units"].partition(":")
    site = tmp_path / "site"
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(code)
    dist = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (dist / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {ref}\n" for name, ref in eps.items()) for group, eps in groups.items()))
    monkeypatch.syspath_prepend(str(site))
    yield
    sys.modules.pop(module, None)


def test_the_documented_plugin_is_discovered_and_listed(installed):
    reg = default_registry()
    assert "units" in reg.names() and reg.origin("units") == "plugin acme_tasks:UnitsTask"
    from evalsuite.cli import cli

    out = CliRunner().invoke(cli, ["tasks"])
    assert out.exit_code == 0, out.output
    assert re.search(r"^units\s+1\s+plugin acme_tasks:UnitsTask\s+unit conversion", out.output, re.M)


def test_the_documented_plugin_keeps_the_task_contract(installed):
    task = default_registry().get("units")
    params = task.params({"conversions": ["length", "time"]})
    first = take(task, params, seed=7, n=6)
    assert [s.id for s in first] == [s.id for s in take(task, params, seed=7, n=6)]  # deterministic
    assert take(task, params, seed=7, n=3, start=3) == first[3:]  # a window of the same stream
    assert [s.metadata["conversion"] for s in first[:4]] == ["length", "time"] * 2  # slices in turn
    assert len(task.samples(task.params(None), seed=7)) == 24 and task.stream_size(params) is None
    sample: Sample = first[0]
    right: Score = task.score(sample, f"3 kilometres is 3 * 1000 = {sample.target:,} metres.")
    assert right.value == 1.0 and right.metrics == {"answered": 1}  # the last number counts
    assert task.score(sample, "I do not know").value == 0.0


def test_the_documented_plugin_runs_through_the_runner(installed, tiny, tmp_path):
    from tests.conftest import prepared, run_model

    task = default_registry().get("units")
    store = run_model(tiny, tmp_path / "run", tasks=prepared(task, n=4, seed=0), kld=False)
    rows = store.samples()
    assert {r.task for r in rows} == {"units"} and len(rows) == 4
    assert all(r.score in (0.0, 1.0) and r.metadata["conversion"] in ("length", "mass", "time", "data")
               for r in rows)
