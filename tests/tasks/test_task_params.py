"""Task parameter files: tasks/<name>.yaml holds plain overrides, checked against the task's parameters."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.paths import TASK_CONFIG_ENV
from evalsuite.tasks.base import GenSettings, Sample, Score, Task
from evalsuite.tasks.params import load_task_params, tasks_dir


class Toy(Task):
    name = "toy"
    default_params: dict[str, Any] = {"n": 2, "words": ["a"]}

    def samples(self, params: dict[str, Any], seed: int) -> list[Sample]:
        return [Sample(id=str(i), target=i, prompt="p") for i in range(self.params(params)["n"])]

    def gen_settings(self, params: dict[str, Any]) -> GenSettings:
        return GenSettings()

    def score(self, sample: Sample, output: str) -> Score:
        return Score(value=0.0)


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    """A working directory with a ./tasks folder (where files are read when --task-config is not given)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(TASK_CONFIG_ENV, raising=False)
    (tmp_path / "tasks").mkdir()
    return Path("tasks")


def test_missing_default_file_means_no_overrides(root):
    assert tasks_dir() == root
    assert load_task_params("needle") == {}


def test_no_tasks_folder_means_the_packaged_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(TASK_CONFIG_ENV, raising=False)
    assert tasks_dir() is None and load_task_params("needle") == {}


def test_task_config_folder_comes_before_dot_tasks(root, tmp_path, monkeypatch):
    """--task-config DIR (what it sets: $EVALSUITE_TASK_CONFIG) is read instead of ./tasks; a named folder that
    does not exist is a one-line error."""
    (root / "reasoning.yaml").write_text("per_cell: 2\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "reasoning.yaml").write_text("per_cell: 3\n")
    assert load_task_params("reasoning") == {"per_cell": 2}
    monkeypatch.setenv(TASK_CONFIG_ENV, str(mine))
    assert tasks_dir() == mine and load_task_params("reasoning") == {"per_cell": 3}
    monkeypatch.setenv(TASK_CONFIG_ENV, str(tmp_path / "absent"))
    with pytest.raises(EvalsuiteError, match="task parameter folder not found") as info:
        load_task_params("reasoning")
    assert "\n" not in str(info.value)


def test_overrides_are_read_and_validated(root):
    (root / "needle.yaml").write_text("context_lens: [256, 512]\ndepths: [0.5]\n")
    params = load_task_params("needle")
    assert params == {"context_lens": [256, 512], "depths": [0.5]}
    from evalsuite.tasks.needle import NeedleTask

    merged = NeedleTask().params(params)
    assert merged["context_lens"] == [256, 512] and merged["kinds"] == NeedleTask.default_params["kinds"]


def test_comment_only_file_is_empty(root):
    (root / "reasoning.yaml").write_text("# nothing set\n")
    assert load_task_params("reasoning") == {}


@pytest.mark.parametrize("text,match", [
    ("- 1\n- 2\n", "mapping"), ("just text\n", "mapping"), ("per_cell: [1\n", "invalid YAML"),
    ("per_cel: 3\n", "unknown parameter 'per_cel'"), ("1: 2\n", "strings"),
])
def test_bad_files_raise_one_line_errors(root, text, match):
    (root / "reasoning.yaml").write_text(text)
    with pytest.raises(EvalsuiteError, match=match) as info:
        load_task_params("reasoning")
    assert "\n" not in str(info.value) and "reasoning.yaml" in str(info.value)


def test_explicit_path_and_task_object(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text("n: 5\n")
    assert load_task_params("toy", path, task=Toy()) == {"n": 5}
    path.write_text("m: 5\n")
    with pytest.raises(EvalsuiteError, match="unknown parameter 'm'"):
        load_task_params("toy", path, task=Toy())
    with pytest.raises(EvalsuiteError, match="not found"):
        load_task_params("toy", tmp_path / "missing.yaml", task=Toy())


def test_unknown_task_name_is_an_error(root):
    (root / "nosuch.yaml").write_text("a: 1\n")
    with pytest.raises(EvalsuiteError, match="unknown task"):
        load_task_params("nosuch")


@pytest.mark.parametrize("name", ["needle", "reasoning"])
def test_shipped_files_are_valid_and_document_the_defaults(name):
    """The shipped files override nothing; their commented-out lines, uncommented, are exactly the defaults."""
    import re

    import yaml

    from evalsuite.tasks.registry import default_registry

    path = Path(__file__).resolve().parents[2] / "tasks" / f"{name}.yaml"
    assert load_task_params(name, path) == {}
    lines = re.findall(r"^# (\w+: .*)$", path.read_text(), flags=re.MULTILINE)
    documented = yaml.safe_load("\n".join(lines))
    assert documented == default_registry(plugins=False).get(name).default_params
