"""`evalsuite compare` on lm-eval --log_samples output written by lm-eval itself (tiny model, evalsuite variants):
paired counts and scores as the logs have them, the prompt-mismatch and one-sided rules, metric choice, and the
compared run under `evalsuite gate`, `report` and `tenants`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsuite.store.sqlite import Store
from evalsuite.gate.store_gate import gate_store


def logged(folder: Path, task: str) -> dict[str, dict]:
    """doc id -> the samples line lm-eval wrote for ``task`` under ``folder``."""
    (path,) = folder.rglob(f"samples_{task}_*.jsonl")
    return {str(d["doc_id"]): d for d in map(json.loads, path.read_text().splitlines())}


def stats_all(run: Path) -> dict[tuple[str, str], object]:
    store = Store.open(run)
    try:
        return {(s.variant, s.task): s for s in gate_store(store).stats if s.slice == "all"}
    finally:
        store.close()


def test_pairs_every_document_with_the_scores_and_answers_lm_eval_logged(lm_eval_logs, cli, tmp_path):
    code, out, err = cli("compare", f"bf16={lm_eval_logs['base']}", f"kv={lm_eval_logs['kv']}", "--run-id", "c")
    assert code in (0, 1) and err == ""
    run = tmp_path / "runs" / "c"
    store = Store.open(run)
    for name, key in (("bf16", "base"), ("kv", "kv")):
        qa, mc = logged(lm_eval_logs[key], "arith_qa"), logged(lm_eval_logs[key], "arith_mc")
        rows = {(r.task, r.sample_id): r for r in store.samples(name)}
        assert {s for t, s in rows if t == "arith_qa"} == set(qa) and {s for t, s in rows if t == "arith_mc"} == set(mc)
        assert all(rows["arith_qa", i].score == d["exact_match"] for i, d in qa.items())
        assert all(rows["arith_qa", i].output == d["filtered_resps"][0] for i, d in qa.items())
        assert all(rows["arith_mc", i].score == d["acc"] for i, d in mc.items())
        # a choice's answer is the continuation with the highest log-likelihood
        for i, d in mc.items():
            lls = [float(x[0]) for x in d["filtered_resps"]]
            assert rows["arith_mc", i].output == d["doc"]["choices"][lls.index(max(lls))]
    state = store.state()
    store.close()
    assert state.baseline == "bf16" and state.variant_order == ["bf16", "kv"] and state.finished
    assert "arith_qa: score = exact_match,strip (binary: flips and McNemar apply)" in state.notes
    stats = stats_all(run)
    assert {k: (s.n, s.n_unpaired) for k, s in stats.items()} == {("kv", "arith_qa"): (6, 0),
                                                                   ("kv", "arith_mc"): (6, 0)}
    assert stats["kv", "arith_mc"].binary and stats["kv", "arith_qa"].binary
    summary = (tmp_path / "reports" / "c" / "summary.md").read_text()
    assert "## Where the samples came from" in summary
    assert "arith_qa: score = exact_match,strip" in (tmp_path / "reports" / "c" / "index.html").read_text()
    assert f"(exit {code})" in summary and "KLD method: not measured" in summary


def test_one_sided_documents_are_counted_and_named_in_the_report(lm_eval_logs, cli, tmp_path):
    """The variant ran lm-eval with --limit 4 and without arith_mc: 2 + 6 baseline documents have no partner."""
    code, out, err = cli("compare", f"bf16={lm_eval_logs['base']}", f"kv={lm_eval_logs['kv_limit']}",
                         "--run-id", "lim")
    assert code == 1 and err == ""  # a task without pairs is INCONCLUSIVE: the gate fails
    stats = stats_all(tmp_path / "runs" / "lim")
    assert (stats["kv", "arith_qa"].n, stats["kv", "arith_qa"].n_unpaired) == (4, 2)
    assert (stats["kv", "arith_mc"].n, stats["kv", "arith_mc"].n_unpaired) == (0, 6)
    line = "kv · arith_qa: 2 only in the baseline bf16 (doc 4, doc 5): left out of the paired statistics (4 pairs)"
    assert line in out
    assert line in (tmp_path / "reports" / "lim" / "summary.md").read_text()
    meta = Store.open(tmp_path / "runs" / "lim").meta()["compare"]
    assert meta["one_sided"]["kv"]["arith_mc"]["baseline_only"] == [str(i) for i in range(6)]
    assert meta["paired"]["kv"] == {"arith_qa": 4, "arith_mc": 0}


def test_a_variant_with_other_prompts_is_refused_in_one_line_and_nothing_is_written(lm_eval_logs, cli, tmp_path):
    code, out, err = cli("compare", f"bf16={lm_eval_logs['base']}", f"kv={lm_eval_logs['kv']}",
                         f"sys={lm_eval_logs['kv_system']}", "--run-id", "m")
    assert code == 2 and err.count("\n") == 1
    assert "sys: task 'arith_qa' doc 0: its prompt differs from the baseline's at character 0" in err
    assert "Answer with a number." in err
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []
    assert not (tmp_path / "reports").exists()


def test_metric_choice_and_metrics_that_cannot_be_gated(lm_eval_logs, cli):
    base, kv = f"bf16={lm_eval_logs['base']}", f"kv={lm_eval_logs['kv']}"
    code, out, _ = cli("compare", base, kv, "--metric", "arith_mc=acc", "--run-id", "m1", "--no-report")
    assert code in (0, 1)
    assert "arith_mc: score = acc,none (binary: flips and McNemar apply; chosen with --metric)" in out
    code, _, err = cli("compare", base, kv, "--metric", "arith_qa=f1", "--run-id", "m2")
    assert code == 2 and "task 'arith_qa': metric 'f1' is not logged; its metrics: exact_match,strip" in err
    ppl = lm_eval_logs["ppl"]
    code, _, err = cli("compare", f"a={ppl}", f"b={ppl}", "--run-id", "m3")
    assert code == 2 and err.count("\n") == 1
    assert ("task 'arith_ppl': metric word_perplexity,none is not a score in [0, 1] (non-numeric values such as"
            in err) and "choose one with --metric arith_ppl=NAME (no metric of this task is)" in err
    code, _, err = cli("compare", f"a={ppl}", f"b={ppl}", "--metric", "arith_ppl=bits_per_byte", "--run-id", "m4")
    assert code == 2 and "metric bits_per_byte,none is not a score in [0, 1]" in err and "choose another" in err


def test_a_metric_logged_under_two_filters_is_named_with_its_filter(lm_eval_logs, cli):
    two = lm_eval_logs["two"]
    code, out, _ = cli("compare", f"a={two}", f"b={two}", "--run-id", "f1", "--no-report")
    assert code in (0, 1) and "arith_two: score = exact_match,strip (binary" in out
    assert "also logged: exact_match,raw" in out
    code, _, err = cli("compare", f"a={two}", f"b={two}", "--metric", "arith_two=exact_match", "--run-id", "f2")
    assert code == 2 and "metric 'exact_match' is logged under several filters (exact_match,strip, exact_match,raw)" \
        in err
    code, out, _ = cli("compare", f"a={two}", f"b={two}", "--metric", "arith_two=exact_match,raw", "--run-id", "f3",
                       "--no-report")
    assert code in (0, 1) and "arith_two: score = exact_match,raw" in out


def test_the_same_prompts_with_other_generation_settings_are_refused(lm_eval_logs, cli, tmp_path):
    code, _, err = cli("compare", f"bf16={lm_eval_logs['base']}", f"kv={lm_eval_logs['kv_gen']}", "--run-id", "g")
    assert code == 2 and err.count("\n") == 1
    assert "kv: task 'arith_qa' doc 0: same prompt, but its request differs from the baseline's" in err
    assert not (tmp_path / "runs" / "g").exists()


def test_logs_that_name_the_same_model_must_be_named(lm_eval_logs, cli):
    """Both logs come from lm-eval runs of an in-process model: lm-eval gives them one made-up model name."""
    code, _, err = cli("compare", str(lm_eval_logs["base"]), str(lm_eval_logs["kv"]), "--run-id", "n")
    assert code == 2 and "name them with NAME=PATH" in err


def test_the_compared_run_is_an_evalsuite_run(lm_eval_logs, cli, tmp_path):
    """`evalsuite gate`, `report` and `tenants` read it; compared again as an evalsuite run it gives the same stats."""
    code, _, _ = cli("compare", f"bf16={lm_eval_logs['base']}", f"kv={lm_eval_logs['kv']}", "--run-id", "c")
    run = tmp_path / "runs" / "c"
    gate_code, out, _ = cli("gate", str(run), "--no-report")
    assert gate_code == code and f"overall: " in out
    assert cli("report", str(run), "--out", str(tmp_path / "again"))[0] == 0
    assert (tmp_path / "again" / "c" / "junit.xml").is_file() and (tmp_path / "again" / "c" / "index.html").is_file()
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text("tenants:\n  lenient:\n    {context: 512, concurrency: 4, gpu_memory: 80GiB, runtime: any, "
                       "policy: {defaults: {min_samples: 1, max_drop: 1.0, max_flip_rate: 1.0}}}\n")
    config = Path(__file__).parents[1] / "data" / "configs" / "smollm2-135m.json"
    code_t, out, _ = cli("tenants", str(run), "--tenants", str(tenants), "--model-config", str(config), "--json")
    (d,) = json.loads(out)["decisions"]
    # logs carry no bytes and "kv" is no spec: it cannot be sized, and the baseline that fits serves the tenant
    assert code_t == 0 and (d["status"], d["variant"]) == ("baseline", "bf16")
    assert [(r["variant"], r["stage"]) for r in d["rejected"]] == [("kv", "fit")]
    assert cli("compare", str(run), str(run), "--run-id", "round-trip", "--no-report")[0] == code
    again = stats_all(tmp_path / "runs" / "round-trip")
    assert {k: (s.n, s.delta, s.flips_right_to_wrong) for k, s in again.items()} == \
        {k: (s.n, s.delta, s.flips_right_to_wrong) for k, s in stats_all(run).items()}


@pytest.mark.parametrize("make, message", [
    (lambda p: p, "no such file or folder"),
    (lambda p: (p.mkdir(), p)[1], "not an lm-eval --log_samples output"),
])
def test_arguments_that_are_no_log_are_one_line(cli, tmp_path, make, message):
    bad = make(tmp_path / "nothing")
    code, _, err = cli("compare", str(bad), str(bad), "--run-id", "x")
    assert code == 2 and message in err and err.count("\n") == 1


def test_slices_come_from_the_documents_fields(lm_eval_logs, cli, tmp_path):
    base, kv = f"bf16={lm_eval_logs['base']}", f"kv={lm_eval_logs['kv']}"
    code, _, _ = cli("compare", base, kv, "--slice-key", "label", "--run-id", "s", "--no-report")
    store = Store.open(tmp_path / "runs" / "s")
    stats = {(s.task, s.slice): s.n for s in gate_store(store).stats}
    store.close()
    labels = [d["doc"]["label"] for d in logged(lm_eval_logs["base"], "arith_mc").values()]
    assert {k: n for k, n in stats.items() if k[0] == "arith_mc" and k[1] != "all"} == \
        {("arith_mc", f"label={v}"): labels.count(v) for v in set(labels)}
    code, _, err = cli("compare", base, kv, "--slice-key", "choices", "--run-id", "s2")
    assert code == 2 and "--slice-key choices: task 'arith_" in err and "document 0 has a list there" in err
    code, _, err = cli("compare", base, kv, "--slice-key", "lenght", "--run-id", "s3")
    assert code == 2 and "--slice-key lenght: no document of any log has that field (fields: answer, choices" in err
