"""Logs written by the real tools: lm-eval ``--log_samples`` output of evalsuite variants of the tiny test model
(lm-eval's own ``simple_evaluate`` and ``EvaluationTracker``, as its command line writes them), once per session."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

LMEVAL_DIR = Path(__file__).parents[1] / "data" / "lmeval"
KV = "kv2g32r16"


@pytest.fixture(scope="session")
def tiny_lm(tokenizer):
    """The tiny random model, in fp32 (several times faster than bf16 on these CPUs)."""
    import torch

    from evalsuite.models import wrap_model
    from tests.conftest import make_tiny_model

    return wrap_model(make_tiny_model(len(tokenizer), dtype=torch.float32), tokenizer, name="tiny32")


def write_lm_eval_log(base, spec: str, out: Path, tasks: list[str], include: Path = LMEVAL_DIR, **kwargs) -> Path:
    """Run lm-eval on an evalsuite variant with ``log_samples`` and save what its CLI saves under ``out``."""
    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    from evalsuite.lmeval.model import EvalsuiteLM
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import parse_variant

    lm = EvalsuiteLM(variant=build_variant(base, parse_variant(spec)), batch_size=6)
    tracker = EvaluationTracker(output_path=str(out))
    res = simple_evaluate(model=lm, tasks=tasks, task_manager=TaskManager(include_path=str(include),
                                                                          include_defaults=False),
                          log_samples=True, bootstrap_iters=0, evaluation_tracker=tracker, **kwargs)
    samples = res.pop("samples")
    tracker.save_results_aggregated(results=res, samples=samples)
    for task in res["configs"]:
        tracker.save_results_samples(task_name=task, samples=samples[task])
    return out


@pytest.fixture(scope="session")
def lm_eval_logs(tiny_lm, tmp_path_factory) -> dict[str, Path]:
    """lm-eval output folders: the baseline (bf16) and a KV variant on arith_qa (generation) and arith_mc (choice);
    the KV variant on the first 4 documents only (--limit 4); the KV variant with a system instruction (other
    prompts) and with --gen_kwargs max_gen_toks=4 (same prompts, other requests), 2 documents each; the baseline
    on a rolling log-likelihood task (perplexities: not scores in [0, 1]) and on a task logged under two filters."""
    root = tmp_path_factory.mktemp("lm_eval_logs")
    extra = root / "tasks"
    extra.mkdir()
    common = {"dataset_path": "json", "test_split": "test", "metadata": {"version": 1.0},
              "dataset_kwargs": {"data_files": {"test": str((LMEVAL_DIR / "arith_qa.jsonl").resolve())}}}
    (extra / "arith_ppl.yaml").write_text(yaml.safe_dump({
        "task": "arith_ppl", **common, "output_type": "loglikelihood_rolling", "doc_to_text": "",
        "doc_to_target": "{{question}}", "metric_list": [{"metric": "word_perplexity"}, {"metric": "bits_per_byte"}]}))
    (extra / "arith_two.yaml").write_text(yaml.safe_dump({
        "task": "arith_two", **common, "output_type": "generate_until",
        "doc_to_text": "Question: {{question}}\nAnswer:", "doc_to_target": "{{answer}}", "generation_kwargs": {"until": ["\n"], "max_gen_toks": 8, "do_sample": False},
        "filter_list": [{"name": "strip", "filter": [{"function": "remove_whitespace"}, {"function": "take_first"}]},
                        {"name": "raw", "filter": [{"function": "take_first"}]}],
        "metric_list": [{"metric": "exact_match"}]}))
    both = ["arith_qa", "arith_mc"]
    return {"base": write_lm_eval_log(tiny_lm, "bf16", root / "base", both),
            "kv": write_lm_eval_log(tiny_lm, KV, root / "kv", both),
            "kv_limit": write_lm_eval_log(tiny_lm, KV, root / "kv_limit", ["arith_qa"], limit=4),
            "kv_system": write_lm_eval_log(tiny_lm, KV, root / "kv_system", ["arith_qa"], limit=2,
                                           system_instruction="Answer with a number."),
            "kv_gen": write_lm_eval_log(tiny_lm, KV, root / "kv_gen", ["arith_qa"], limit=2,
                                        gen_kwargs="max_gen_toks=4"),
            "ppl": write_lm_eval_log(tiny_lm, "bf16", root / "ppl", ["arith_ppl"], include=extra, limit=2),
            "two": write_lm_eval_log(tiny_lm, "bf16", root / "two", ["arith_two"], include=extra, limit=3)}


@pytest.fixture
def cli(monkeypatch, capsys, tmp_path):
    """``evalsuite ARGS...`` in-process -> (exit code, stdout, stderr); runs and reports under ``tmp_path``."""
    monkeypatch.setenv("EVALSUITE_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("EVALSUITE_REPORTS", str(tmp_path / "reports"))

    def run(*args: str) -> tuple[int, str, str]:
        from evalsuite.cli import main

        monkeypatch.setattr(sys, "argv", ["evalsuite", *map(str, args)])
        with pytest.raises(SystemExit) as exc:
            main()
        out = capsys.readouterr()
        return exc.value.code, out.out, out.err

    return run
