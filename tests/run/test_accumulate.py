"""--accumulate: one run folder per exact configuration and code; a later invocation continues it under its new
budget (more pairs, no answer generated twice), and anything else that changes starts a new folder."""
from __future__ import annotations

import subprocess
import sys

import pytest

from evalsuite.cli.run_cmd import accumulated
from evalsuite.core.config import RunConfig
from evalsuite.backends.inprocess.inprocess import InProcessBackend
from evalsuite.gate.decide import store_decider
from evalsuite.run.accumulate import accumulate_id
from evalsuite.run.pipeline import execute
from evalsuite.tasks.registry import Registry
from tests.run.test_rounds import BigCopyTask


def _config(**kw):
    base = dict(model="tiny", variants=["bf16", {"name": "noop", "spec": "bf16"}], tasks=["copy"], batch_size=8,
                round_size=20)
    return RunConfig(**{**base, **kw})


def test_the_folder_is_keyed_by_everything_but_the_budget_and_cap(tmp_path):
    same = accumulate_id(_config(budget_s=60.0))
    assert same == accumulate_id(_config(budget_s=600.0, max_samples=40)) and same.startswith("acc-")
    assert same != accumulate_id(_config(variants=["bf16", "w4g64"]))
    assert same != accumulate_id(_config(seed=7)) and same != accumulate_id(_config(batch_size=16))
    model = tmp_path / "model.gguf"
    model.write_bytes(b"x")
    first = accumulate_id(_config(model=str(model)))
    model.write_bytes(b"xy")  # another file under the same path
    assert accumulate_id(_config(model=str(model))) != first


@pytest.mark.slow
def test_a_second_invocation_continues_the_run_under_its_new_budget(tiny, tmp_path):
    scored: list[str] = []
    counted = type("Counted", (BigCopyTask,), {"score": lambda self, s, o: scored.append(s.id) or
                                               BigCopyTask.score(self, s, o)})
    reg = Registry()
    reg.register("copy", counted)

    def go(config, run_dir, resume):
        return execute(config, run_dir, resume, InProcessBackend.of(tiny, seed=config.seed), progress=False,
                       log=lambda s: None, registry=reg, decide=store_decider(), baselines=tmp_path / "baselines",
                       grow_baseline=True)  # as make gate: a stored, grown baseline too

    config, run_dir, resume = accumulated(_config(max_samples=20, budget_s=600.0), tmp_path)
    assert resume is None and run_dir.name == accumulate_id(config)
    first = go(config, run_dir, False)
    assert first.meta()["drawn"]["copy"] == len(scored) == 20  # the baseline's answers (the no-op copies them)
    made = set(scored)
    scored.clear()
    config, again, resume = accumulated(_config(budget_s=300.0), tmp_path)  # the cap: the stream's 200
    assert (again, resume) == (run_dir, run_dir.name) and (config.max_samples, config.budget_s) == (None, 300.0)
    second = go(config, run_dir, True)
    drawn = second.meta()["drawn"]["copy"]
    assert drawn > 20 and len(scored) == drawn - 20 and not made & set(scored)  # only new samples answered
    assert len(second.samples("noop")) == drawn


@pytest.mark.slow
def test_accumulate_with_resume_or_run_id_is_one_line_exit_2(tmp_path):
    for extra in (["--resume", "x"], ["--run-id", "x"]):
        res = subprocess.run([sys.executable, "-c", "from evalsuite.cli import main; main()", "run", "--accumulate",
                              *extra, "--out", str(tmp_path / "runs")], capture_output=True, text=True,
                             timeout=300, cwd=tmp_path)
        assert res.returncode == 2 and "--accumulate" in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()
