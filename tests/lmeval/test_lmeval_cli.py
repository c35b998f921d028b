"""`evalsuite export-lm-eval` and the `python -m evalsuite.lmeval` wrapper (embedded model, marked)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

LMEVAL_DIR = Path(__file__).parents[1] / "data" / "lmeval"


def _main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    from evalsuite.cli import main

    monkeypatch.setattr(sys, "argv", ["evalsuite", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_export_cli_writes_the_task_prepared_like_run(monkeypatch, capsys, tmp_path):
    from evalsuite.core.config import RunConfig
    from evalsuite.run.prepare import prepare_tasks
    from evalsuite.tasks.registry import default_registry

    code, out, _ = _main(monkeypatch, capsys, "export-lm-eval", "json", str(tmp_path / "x"), "--limit", "3",
                         "--seed", "5", "--param", "max_new_tokens=40")
    assert code == 0 and "evalsuite_json (3 docs)" in out
    docs = [json.loads(line) for line in (tmp_path / "x" / "evalsuite_json.jsonl").read_text().splitlines()]
    (task,) = prepare_tasks(RunConfig(tasks=["json"], task_params={"json": {"max_new_tokens": 40}}, seed=5,
                                      limit=3), default_registry())
    assert [d["id"] for d in docs] == [s.id for s in task.samples]
    assert "max_gen_toks: 40" in (tmp_path / "x" / "evalsuite_json.yaml").read_text()


@pytest.mark.parametrize("args, message", [
    (("jsn",), "unknown task 'jsn'; did you mean json"),
    (("json", "--param", "bogus=1"), "unknown parameter 'bogus'"),
])
def test_export_cli_bad_input_is_one_line_exit_2(monkeypatch, capsys, tmp_path, args, message):
    code, _, err = _main(monkeypatch, capsys, "export-lm-eval", args[0], str(tmp_path / "y"), *args[1:])
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "y").exists()


@pytest.mark.embedded
def test_lm_eval_cli_wrapper_matches_evalsuite_run_on_embedded_model(embedded, monkeypatch, tmp_path):
    """`python -m evalsuite.lmeval run --model evalsuite --model_args variant=KV ...` (the model loaded from its
    name) gives the outputs and scores that `evalsuite run` stores for that KV variant."""
    from evalsuite.lmeval.harness import main
    from evalsuite.core.config import RunConfig
    from evalsuite.run.prepare import prepare_tasks
    from evalsuite.tasks.registry import default_registry
    from tests.conftest import run_model

    spec = "kv4g32r16"
    from evalsuite.lmeval import register_tasks

    key = "lm_eval:arith_qa"
    config = RunConfig(tasks=[key], task_params={key: {"include": str(LMEVAL_DIR), "limit": 3}})
    register_tasks()
    tasks = prepare_tasks(config, default_registry())
    store = run_model(embedded, tmp_path / "run", ("bf16", spec), tasks=tasks, batch_size=3, kld=False)
    assert sum(r.score for r in store.samples("bf16")) >= 1  # the real model gets some sums right
    monkeypatch.setattr(sys, "argv", [
        "lm-eval", "run", "--model", "evalsuite", "--model_args", f"variant={spec},batch_size=3",
        "--include_path", str(LMEVAL_DIR), "--tasks", "arith_qa", "--limit", "3", "--log_samples",
        "--output_path", str(tmp_path / "out")])
    main()
    (path,) = (tmp_path / "out").rglob("samples_arith_qa_*.jsonl")
    theirs = {f"doc{d['doc_id']}": d for d in map(json.loads, path.read_text().splitlines())}
    ours = {r.sample_id: r for r in store.samples(spec, "lm_eval:arith_qa")}
    assert theirs.keys() == ours.keys()
    assert all(theirs[k]["resps"][0][0] == ours[k].output for k in ours)
    assert all(theirs[k]["exact_match"] == ours[k].score for k in ours)
