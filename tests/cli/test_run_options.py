"""`evalsuite run`'s option handling: tasks and parameters, a resumed run's config, options that exclude each other."""
from __future__ import annotations

from pathlib import Path

import pytest

from evalsuite.cli.run_cmd import task_options
from tests.cli.test_exit_codes import _cli


def test_task_options_add_lm_eval_tasks_with_their_include_folder(tmp_path):
    tasks, params = task_options(" reasoning, ,json", ("needle.context_lens=[512]",), ("arith_qa", "b"),
                                 tmp_path / "yamls")
    assert tasks == ["reasoning", "json", "lm_eval:arith_qa", "lm_eval:b"]
    assert params["needle"] == {"context_lens": [512]}
    assert params["lm_eval:arith_qa"] == params["lm_eval:b"] == {"include": str((tmp_path / "yamls").resolve())}
    assert task_options("code", (), ("x",), None) == (["code", "lm_eval:x"], {})


@pytest.mark.slow
def test_strict_and_growing_baselines_exclude_each_other_before_anything_runs(tmp_path: Path):
    res = _cli("run", "--baseline", str(tmp_path / "a"), "--store-baseline", str(tmp_path / "b"), "--out",
               str(tmp_path / "runs"), cwd=tmp_path)
    assert res.returncode == 2
    assert "exclude each other" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # no run folder
