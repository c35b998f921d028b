"""The task registry: built-ins, entry-point plugins, near-miss suggestions."""
import sys

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks.registry import ENTRY_POINT_GROUP, Registry, default_registry


@pytest.fixture
def plugin_on_path(tmp_path, monkeypatch):
    """A real installed distribution (dist-info on sys.path) declaring an `evalsuite.tasks` entry point."""
    pkg = tmp_path / "site"
    (pkg / "acme_tasks").mkdir(parents=True)
    (pkg / "acme_tasks" / "__init__.py").write_text(
        "from tests.toytask import CopyTask\n\nclass AcmeCopy(CopyTask):\n    name = 'acme_copy'\n")
    dist = pkg / "acme_tasks-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-tasks\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nacme_copy = acme_tasks:AcmeCopy\n")
    monkeypatch.syspath_prepend(str(pkg))
    yield
    sys.modules.pop("acme_tasks", None)


def test_plugin_is_discovered_and_runs(plugin_on_path, tiny, tmp_path):
    reg = default_registry()
    assert "acme_copy" in reg.names() and reg.origin("acme_copy").startswith("plugin")
    task = reg.get("acme_copy")
    from evalsuite.run.config import RunConfig
    from evalsuite.run.prepare import PreparedTask, prepare_variants
    from evalsuite.run.runner import Runner
    from evalsuite.run.store import Store

    params = task.params({"n": 3})
    prepared = [PreparedTask(task, params, task.gen_settings(params), task.samples(params, 0))]
    config = RunConfig(model="tiny", variants=["bf16"], tasks=["acme_copy"], kld=False)
    store = Store.create(tmp_path / "run", config.to_dict())
    Runner(config, tiny, prepared, store, progress=False).run(prepare_variants(config))
    assert {r.task for r in store.samples()} == {"acme_copy"} and len(store.samples()) == 3


def test_unknown_task_suggests_nearest():
    with pytest.raises(EvalsuiteError, match="did you mean needle"):
        default_registry(plugins=False).get("neddle")


def test_builtins_listed_and_duplicates_refused():
    reg = default_registry(plugins=False)
    assert {"needle", "reasoning", "code", "json"} <= set(reg.names())
    r = Registry()
    r.register("x", lambda: None)
    with pytest.raises(EvalsuiteError, match="twice"):
        r.register("x", lambda: None)
    with pytest.raises(EvalsuiteError, match="did not produce a Task"):
        r.get("x")
