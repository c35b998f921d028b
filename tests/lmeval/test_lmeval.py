"""lm-eval bridge: lm-eval tasks through `evalsuite run`, evalsuite tasks exported to lm-eval, the `evalsuite`
lm-eval model (generation with the variant's KV cache, two-chunk log-likelihoods). Tiny random model, offline."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from evalsuite.errors import EvalsuiteError
from evalsuite.core.config import RunConfig
from evalsuite.run.prepare import PreparedTask
from evalsuite.store.sqlite import Store
from evalsuite.variants.build import build_variant
from evalsuite.variants.spec import parse_variant

LMEVAL_DIR = Path(__file__).parents[1] / "data" / "lmeval"
KV = "kv4g32r16"


@pytest.fixture
def tiny32(tokenizer):
    """The tiny random model in fp32 (several times faster than bf16 on these CPUs), its matrices redrawn with
    std 0.1 so that greedy outputs depend on the prompt and a KV variant changes some of them."""
    import torch

    from evalsuite.models import wrap_model
    from tests.conftest import make_tiny_model

    model = make_tiny_model(len(tokenizer), dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return wrap_model(model, tokenizer, name="tiny32")


def _lm_eval_task(name="arith_qa", limit=None, seed=1234) -> PreparedTask:
    """``lm_eval:<name>`` through the task Registry, as `evalsuite run --lm-eval-task` prepares it."""
    from evalsuite.lmeval import register_tasks
    from evalsuite.run.prepare import prepare_tasks
    from evalsuite.tasks.registry import default_registry

    register_tasks()  # what the command line does at its start
    key = f"lm_eval:{name}"
    config = RunConfig(tasks=[key], task_params={key: {"include": str(LMEVAL_DIR), "limit": limit}}, seed=seed)
    (task,) = prepare_tasks(config, default_registry())
    return task


def _run(base, tasks, tmp_path, variants=("bf16", KV), batch_size=2) -> Store:
    from tests.conftest import run_model

    return run_model(base, tmp_path / "run", variants, tasks=tasks, batch_size=batch_size, kld=False)


def _simple_evaluate(lm, include: Path, task: str, limit=None) -> list[dict]:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    res = simple_evaluate(model=lm, tasks=[task], task_manager=TaskManager(include_path=str(include),
                                                                            include_defaults=False),
                          log_samples=True, limit=limit, bootstrap_iters=0)
    return sorted(res["samples"][task], key=lambda s: s["doc_id"])


def _lm(base, spec: str, batch_size=2, **kw):
    from evalsuite.lmeval.model import EvalsuiteLM

    return EvalsuiteLM(variant=build_variant(base, parse_variant(spec)), batch_size=batch_size, **kw)


# --- lm-eval task -> evalsuite task ------------------------------------------------------------------------

def test_adapter_uses_lm_eval_contexts_filters_and_metric():
    task = _lm_eval_task()
    assert task.name == "lm_eval:arith_qa" and len(task.samples) == 6
    assert task.samples[0].prompt == "Question: What is 2+3?\nAnswer:"
    assert task.gen.stop == ("\n",) and task.gen.max_new_tokens == 8 and task.gen.temperature == 0
    assert task.task.binary and task.version.startswith("1.0+")
    assert task.version == _lm_eval_task(limit=2).version  # same config -> same version
    score = task.task.score
    s0 = task.samples[0]  # answer "5"; the task strips whitespace, ignores case and punctuation
    assert [score(s0, o).value for o in ("5", "  5 ", "5.", "Five", "6", "15")] == [1, 1, 1, 0, 0, 0]
    assert score(s0, " 5").extracted == "5"
    assert len(_lm_eval_task(limit=2).samples) == 2


def test_non_generate_and_unknown_lm_eval_tasks_are_one_line_errors():
    with pytest.raises(EvalsuiteError, match="multiple_choice.*generate_until") as exc:
        _lm_eval_task("arith_mc")
    assert "\n" not in str(exc.value)
    with pytest.raises(EvalsuiteError, match="unknown lm-eval task 'arith_q'.*arith_qa"):
        _lm_eval_task("arith_q")


def test_prepare_tasks_adds_lm_eval_tasks():
    task = _lm_eval_task(limit=3)
    assert task.name == "lm_eval:arith_qa" and [s.id for s in task.samples] == ["doc0", "doc1", "doc2"]


@pytest.mark.slow
def test_lm_eval_task_is_run_stored_gated_and_matches_lm_eval(tiny32, tmp_path):
    """`evalsuite run` on an lm-eval task: stored like a built-in task, gated, and the same outputs/scores as
    lm-eval itself gives with the `evalsuite` model (baseline and KV variant)."""
    from evalsuite.gate.policy import load_policy
    from evalsuite.gate.verdict import gate_run

    task = _lm_eval_task()
    store = _run(tiny32, [task], tmp_path)
    rows = {v: store.samples(v, "lm_eval:arith_qa") for v in ("bf16", KV)}
    assert [len(r) for r in rows.values()] == [6, 6]
    assert {r.task_version for r in rows["bf16"]} == {task.version}
    assert store.meta()["task_versions"]["lm_eval:arith_qa"] == task.version
    for r in rows[KV]:  # stored scores are the lm-eval task's own exact_match of the stored output
        sample = next(s for s in task.samples if s.id == r.sample_id)
        assert r.score == task.task.score(sample, r.output).value and r.prompt == sample.prompt
    stats, gate = gate_run(rows["bf16"], {KV: rows[KV]}, {}, load_policy())
    (st,) = [s for s in stats if s.task == "lm_eval:arith_qa" and s.slice == "all"]
    assert st.n == 6 and st.binary
    assert any(c.task == "lm_eval:arith_qa" for c in gate.checks) and KV in gate.variant_verdicts
    for spec in ("bf16", KV):
        ours = {r.sample_id: r for r in rows[spec]}
        theirs = _simple_evaluate(_lm(tiny32, spec), LMEVAL_DIR, "arith_qa")
        assert [s["resps"][0][0] for s in theirs] == [ours[f"doc{s['doc_id']}"].output for s in theirs]
        assert [s["exact_match"] for s in theirs] == [ours[f"doc{s['doc_id']}"].score for s in theirs]


# --- evalsuite task -> lm-eval task (export) ---------------------------------------------------------------

def _json_task(n=4, max_new_tokens=12) -> PreparedTask:
    from evalsuite.tasks.json_task import JsonTask

    t = JsonTask()
    params = t.params({"n": n, "max_new_tokens": max_new_tokens})
    return PreparedTask(t, params, t.gen_settings(params), t.samples(params, 7))


def test_export_writes_a_self_contained_lm_eval_task(tiny32, tmp_path):
    from evalsuite.lmeval.export import export_task

    task = _json_task(n=3)
    out = export_task(task, tiny32.tokenizer, tmp_path / "x", seed=7)
    text = out.yaml_path.read_text()
    assert "process_results: !function evalsuite_json_utils.process_results" in text
    cfg = yaml.safe_load(text.replace("!function", ""))
    assert cfg["task"] == "evalsuite_json" and cfg["output_type"] == "generate_until"
    assert Path(cfg["dataset_kwargs"]["data_files"]["test"]).is_absolute()
    assert cfg["generation_kwargs"] == {"until": [], "max_gen_toks": 12, "do_sample": False, "temperature": 0.0}
    docs = [json.loads(line) for line in out.data_path.read_text().splitlines()]
    assert len(docs) == 3 == out.n_docs
    # the chat template is applied at export time, exactly as `evalsuite run` renders the prompt
    assert docs[0]["prompt"].startswith("<|im_start|>") and docs[0]["add_special_tokens"] is False
    from evalsuite.lmeval.hook import sample_from_doc

    assert sample_from_doc(docs[1]) == task.samples[1]


@pytest.mark.slow
def test_exported_task_scores_like_evalsuite_run_baseline_and_kv_variant(tiny32, tmp_path):
    """Same per-sample outputs and scores through lm-eval (`evalsuite` model) as through `evalsuite run`."""
    from evalsuite.lmeval.export import export_task

    task = _json_task(n=4)
    out = export_task(task, tiny32.tokenizer, tmp_path / "export", seed=7)
    store = _run(tiny32, [task], tmp_path)
    for spec in ("bf16", KV):
        ours = {r.sample_id: r for r in store.samples(spec, "json")}
        theirs = _simple_evaluate(_lm(tiny32, spec), out.yaml_path.parent, out.task_name)
        assert len(theirs) == 4
        for s in theirs:
            r = ours[s["doc"]["id"]]
            assert s["resps"][0][0] == r.output and s["score"] == r.score
    base, kv = ([r.output for r in store.samples(spec, "json")] for spec in ("bf16", KV))
    assert all(base) and base != kv  # non-trivial outputs, and the KV cache changed some of them


def test_export_hook_scores_with_task_score_and_score_many(tmp_path, tiny32):
    from evalsuite.lmeval.hook import score_doc, sample_to_json

    task = _json_task(n=2)
    s = task.samples[0]
    doc = {"sample": sample_to_json(s)}
    spec = {"task": "json", "version": "1", "params": task.params}
    good = json.dumps(s.target["truth"]) if s.target["truth"] is not None else "{}"
    assert score_doc(spec, doc, [good]) == {"score": task.task.score(s, good).value}
    assert score_doc(spec, doc, ["not json"]) == {"score": 0.0}
    many = score_doc(spec, doc, [["not json", good]])  # n > 1 (take_first_k) -> score_many
    assert many == {"score": task.task.score_many(s, ["not json", good]).value}


# --- the `evalsuite` lm-eval model: log-likelihoods ---------------------------------------------------------

def _requests(kind, args, doc=None):
    from lm_eval.api.instance import Instance

    return [Instance(kind, doc or {}, a, 0, ("t", i, 1)) for i, a in enumerate(args)]


def test_loglikelihood_matches_lm_eval_hf_backend(tiny32):
    from lm_eval.models.huggingface import HFLM

    ctx = "The quick brown fox jumps over the lazy dog. " * 3
    args = [(ctx, " and runs"), ("Question: 2+3?\nAnswer:", " 5"), ("", "hello world"), (ctx + "x ", "y")]
    ours = _lm(tiny32, "bf16", batch_size=3).loglikelihood(_requests("loglikelihood", args), disable_tqdm=True)
    hf = HFLM(pretrained=tiny32.model, tokenizer=tiny32.tokenizer, batch_size=3, max_length=4096)
    theirs = hf.loglikelihood(_requests("loglikelihood", args), disable_tqdm=True)
    for (a, ga), (b, gb) in zip(ours, theirs):
        assert a == pytest.approx(b, abs=1e-3) and ga == gb
    assert all(lp < 0 for lp, _ in ours)


def test_loglikelihood_reads_the_quantized_kv_cache(tiny32):
    """A KV variant changes continuation log-probs (context is past the residual window); weights are shared."""
    ctx = " ".join(f"word{i}" for i in range(60))
    args = [(ctx, " word60 word61 word62"), (ctx[:200], " again")]
    base = _lm(tiny32, "bf16").loglikelihood(_requests("loglikelihood", args), disable_tqdm=True)
    kv = _lm(tiny32, "kv2g32r16").loglikelihood(_requests("loglikelihood", args), disable_tqdm=True)
    assert all(abs(a[0] - b[0]) > 1e-4 for a, b in zip(base, kv))


def test_loglikelihood_rolling_matches_lm_eval_hf_backend(tiny32):
    from lm_eval.models.huggingface import HFLM

    texts = [("The quick brown fox jumps over the lazy dog, " * 4,), ("short text",)]
    ours = _lm(tiny32, "bf16", max_length=24, chunk_tokens=5).loglikelihood_rolling(
        _requests("loglikelihood_rolling", texts), disable_tqdm=True)
    hf = HFLM(pretrained=tiny32.model, tokenizer=tiny32.tokenizer, batch_size=2, max_length=24)
    theirs = hf.loglikelihood_rolling(_requests("loglikelihood_rolling", texts), disable_tqdm=True)
    assert ours == pytest.approx(theirs, abs=2e-3) and all(math.isfinite(x) and x < 0 for x in ours)


@pytest.mark.slow
def test_multiple_choice_task_through_lm_eval_with_kv_variant(tiny32):
    base = _simple_evaluate(_lm(tiny32, "bf16"), LMEVAL_DIR, "arith_mc")
    kv = _simple_evaluate(_lm(tiny32, "kv2g32r16"), LMEVAL_DIR, "arith_mc")
    assert len(base) == len(kv) == 6 and all(s["acc"] in (0.0, 1.0) for s in base + kv)
    assert all(len(s["resps"]) == 3 for s in base)  # one log-likelihood per choice


# --- registration and model_args ----------------------------------------------------------------------------

def test_registered_model_and_model_args(tiny32):
    from lm_eval.api.registry import get_model

    from evalsuite.lmeval import register
    from evalsuite.lmeval.model import EvalsuiteLM, gen_settings

    register()
    register()  # idempotent
    assert get_model("evalsuite") is EvalsuiteLM
    assert get_model("hf").__name__ == "HFLM"  # lm-eval's own models still resolve
    lm = EvalsuiteLM.create_from_arg_obj({"model": tiny32, "variant": KV, "batch_size": 4},
                                         {"batch_size": 1, "device": "cpu"})
    assert lm.batch_size == 4 and lm.built.name == KV and lm.built.make_cache() is not None
    assert EvalsuiteLM.create_from_arg_obj({"model": tiny32}, {"batch_size": "auto"}).batch_size == 16
    assert lm.add_special({}) is True  # raw prompts: like `evalsuite run` renders them
    text = lm.apply_chat_template([{"role": "user", "content": "hi"}])  # lm-eval's --apply_chat_template
    assert text.startswith("<|im_start|>") and text.endswith("<|im_start|>assistant\n")
    assert lm.add_special({}) is False and lm.add_special({"add_special_tokens": True}) is True
    with pytest.raises(EvalsuiteError, match="batch_size"):
        EvalsuiteLM(model=tiny32, batch_size="many")
    g = gen_settings({"until": "\n\n", "max_gen_toks": 5, "do_sample": True, "temperature": 0.7, "top_k": 3})
    assert g.stop == ("\n\n",) and g.max_new_tokens == 5 and g.temperature == 0.7
    assert gen_settings({"until": ["a"], "temperature": 0.7}).temperature == 0.0  # no do_sample: greedy


def test_generate_until_honours_until_and_max_gen_toks(tiny32):
    lm = _lm(tiny32, "bf16")
    reqs = _requests("generate_until", [("Hello there", {"until": [], "max_gen_toks": 3}),
                                         ("Hello there", {"until": [], "max_gen_toks": 12})])
    short, long_ = lm.generate_until(reqs, disable_tqdm=True)
    assert len(tiny32.tokenizer(short, add_special_tokens=False)["input_ids"]) <= 4
    assert long_.startswith(short) and len(long_) > len(short) + 5
    stop = long_[len(long_) // 2:][:3]
    (stopped,) = lm.generate_until(_requests("generate_until", [("Hello there", {"until": [stop],
                                                                                "max_gen_toks": 12})]),
                                   disable_tqdm=True)
    assert stopped == long_[:long_.index(stop)].rstrip()
