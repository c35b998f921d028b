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
    from tests.conftest import prepared, run_model

    store = run_model(tiny, tmp_path / "run", tasks=prepared(reg.get("acme_copy"), n=3, seed=0), kld=False)
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


def test_lm_eval_prefix_resolves_once_registered_from_above(monkeypatch):
    """The task registry names no package above it: ``evalsuite.lmeval`` registers ``lm_eval:`` (the command line
    calls ``register_tasks`` at its start)."""
    from evalsuite.lmeval import register_tasks
    from evalsuite.tasks import registry

    monkeypatch.setattr(registry, "_RESOLVERS", {})  # this process as it starts, whatever ran before
    with pytest.raises(EvalsuiteError, match="unknown task"):
        default_registry(plugins=False).get("lm_eval:arith_qa")
    register_tasks()
    reg = default_registry(plugins=False)
    with pytest.raises(EvalsuiteError, match="name the task"):
        reg.get("lm_eval:")
    task = reg.get("lm_eval:arith_qa")
    assert task.name == "lm_eval:arith_qa" and set(task.default_params) == {"include", "limit"}
