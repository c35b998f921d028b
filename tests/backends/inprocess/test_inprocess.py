"""The in-process backend: pass@k generations (n per sample, seeded per row), metrics stored, task context."""
from __future__ import annotations

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.backends.inprocess.inprocess import InProcessBackend
from evalsuite.tasks.base import GenSettings, Score
from tests.conftest import prepared, run_model
from tests.toytask import CopyTask


class SampledCopyTask(CopyTask):
    """CopyTask sampled at temperature 1 with n generations per sample; score_many = fraction found."""

    name = "sampled_copy"
    default_params = {**CopyTask.default_params, "n_gen": 3}

    def gen_settings(self, params):
        return GenSettings(max_new_tokens=6, temperature=1.0, n=params["n_gen"])

    def score_many(self, sample, outputs):
        found = [sample.target in o.lower() for o in outputs]
        return Score(value=sum(found) / len(found), metrics={"pass@1": sum(found) / len(found), "n": len(found)})


@pytest.mark.slow
def test_pass_at_k_generates_n_per_sample_deterministically(tiny, tmp_path):
    tasks = prepared(SampledCopyTask(), n=4)
    a = run_model(tiny, tmp_path / "a", tasks=tasks, kld=False)
    b = run_model(tiny, tmp_path / "b", tasks=tasks, kld=False, batch_size=3)
    rows = a.samples("bf16")
    assert len(rows) == 4 and all(len(r.outputs) == 3 and r.output == r.outputs[0] for r in rows)
    assert all(r.metrics["n"] == 3 and 0 <= r.metrics["pass@1"] <= 1 for r in rows)
    assert any(len(set(r.outputs)) > 1 for r in rows)  # sampled, not three copies of one greedy answer
    # each row has its own seed: another batch size gives the same draws (in bf16, up to rare ties)
    same = sum(x.outputs == y.outputs for x, y in zip(rows, b.samples("bf16")))
    assert same >= 3


def test_metrics_reach_the_store_and_stats(tiny, tmp_path):
    from evalsuite.gate.store_gate import gate_store

    store = run_model(tiny, tmp_path / "a", ("bf16", "w8"), tasks=prepared(SampledCopyTask(), n=4), kld=False)
    assert all("pass@1" in r.metrics for r in store.samples())
    row = next(s for s in gate_store(store).stats if s.variant == "w8" and s.slice == "all")
    assert set(row.metrics["pass@1"]) >= {"baseline", "variant", "delta", "n", "cs_low", "cs_high"}


def test_task_context_counts_the_models_own_prompt_tokens(tiny):
    from evalsuite.run.prompts import render_prompt

    backend = InProcessBackend.of(tiny)
    ctx = backend.task_context()
    sample = prepared(n=1)[0].samples[0]
    text, special = render_prompt(sample, tiny.tokenizer)
    assert ctx.count_tokens(sample) == len(tiny.tokenizer(text, add_special_tokens=special)["input_ids"])
    assert ctx.max_positions() == tiny.meta["max_positions"]


def test_needle_prompts_are_sized_in_the_models_tokens(tiny):
    from evalsuite.tasks.needle import NeedleTask

    task = NeedleTask()
    task.context = InProcessBackend.of(tiny).task_context()
    params = {"kinds": ["single", "variable_tracking"], "context_lens": [512, 1024], "depths": [0.5]}
    for s in task.samples(params, 0):
        measured = s.target["prompt_tokens"]
        assert abs(measured - s.metadata["context_len"]) <= max(8, s.metadata["context_len"] // 100)
        assert task.score(s, "").metrics["prompt_tokens"] == measured
    with pytest.raises(EvalsuiteError, match="window"):  # the tiny model has 4096 positions
        task.samples({**params, "context_lens": [4096]}, 0)
