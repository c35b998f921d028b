"""Sequential rounds: samples drawn round by round until the gate decides; decided variants stop; a re-gate of
the stored run gives the same verdicts; a budget stops a run that --resume continues."""
from __future__ import annotations

import pytest

from evalsuite.gate.decide import store_decider
from evalsuite.gate.store_gate import gate_store
from evalsuite.core.config import RunConfig
from evalsuite.backends.inprocess.inprocess import InProcessBackend
from evalsuite.run.pipeline import execute
from evalsuite.store.sqlite import Store
from evalsuite.tasks.registry import Registry
from tests.conftest import prepared
from tests.toytask import CopyTask

VARIANTS = ["bf16", {"name": "noop", "spec": "bf16"}, "w2g32"]


class BigCopyTask(CopyTask):
    """CopyTask with a 200-sample default set (its stream, by the Task default)."""

    default_params = {**CopyTask.default_params, "n": 200}


def _registry() -> Registry:
    reg = Registry()
    reg.register("copy", BigCopyTask)
    return reg


@pytest.fixture
def policy(tmp_path):
    """The shipped thresholds, with a KLD limit the tiny model's 2-bit variant cannot meet."""
    path = tmp_path / "policy.yaml"
    path.write_text("defaults: {max_kld: 0.001}\n")
    return path


def _execute(tiny, run_dir, policy, resume=False, **kw):
    config = RunConfig(model="tiny", variants=VARIANTS, tasks=["copy"], batch_size=8, max_samples=160,
                       round_size=20, **kw)
    return execute(config, run_dir, resume, InProcessBackend.of(tiny, seed=config.seed), progress=False,
                   log=lambda s: None, registry=_registry(), decide=store_decider(policy))


@pytest.mark.slow
def test_rounds_stop_each_variant_when_decided(tiny, tmp_path, policy):
    store = _execute(tiny, tmp_path / "r", policy)
    meta = store.meta()
    assert meta["stop_reason"] == "every check decided"
    gated = gate_store(store, policy)
    assert gated.gate.variant_verdicts == {"noop": "PASS", "w2g32": "FAIL"}
    drawn = meta["drawn"]["copy"]
    # a no-op needs ~77 identical pairs at max_drop 0.05: the second draw asks for that, in whole batches of 8
    assert (drawn - 20) % 8 == 0 and 60 <= drawn < 160
    assert meta["stopped"] == {"noop": {"copy": "decided (PASS)"}, "w2g32": {"copy": "variant FAILed"}}
    assert set(meta["seconds_per_pair"]) >= {"bf16/copy", "noop/copy", "w2g32/copy"}
    assert len(store.samples("noop", "copy")) == drawn == len(store.samples("bf16", "copy"))
    failed_at = len(store.samples("w2g32", "copy"))  # FAILed (KLD) within its first look: no more samples
    assert failed_at < 20
    fail = [c for c in gated.gate.checks if c.variant == "w2g32" and c.verdict == "FAIL"]
    assert fail and all(c.n == failed_at for c in fail)
    again = gate_store(Store.open(store.path.parent), policy)  # re-gating the stored run reproduces every verdict
    assert [(c.check, c.verdict, c.n) for c in again.gate.checks] == [(c.check, c.verdict, c.n)
                                                                       for c in gated.gate.checks]


@pytest.mark.slow
def test_budget_stops_and_resume_continues(tiny, tmp_path, policy):
    store = _execute(tiny, tmp_path / "b", policy, budget_s=1e-9)
    assert store.meta()["stop_reason"].startswith("budget") and store.meta()["drawn"]["copy"] == 20
    assert store.samples() == []  # the budget was spent before any work started: nothing began
    empty = gate_store(store, policy).gate  # nothing ran: every variant INCONCLUSIVE, never a silent PASS
    assert empty.variant_verdicts == {"noop": "INCONCLUSIVE", "w2g32": "INCONCLUSIVE"} and empty.exit_code == 1
    assert all(c.more_needed for c in empty.checks)
    store.close()
    resumed = _execute(tiny, tmp_path / "b", policy, resume=True)
    assert resumed.meta()["stop_reason"] == "every check decided"
    assert gate_store(resumed, policy).gate.variant_verdicts == {"noop": "PASS", "w2g32": "FAIL"}
    ids = [r.sample_id for r in resumed.samples("bf16")]
    assert len(ids) == len(set(ids)) == resumed.meta()["drawn"]["copy"]


@pytest.mark.parametrize("value", ["0", "-5m", "ten minutes", "5x", "inf"])
def test_bad_budget_is_one_line_error(value):
    from evalsuite.cli.run_cmd import parse_duration
    from evalsuite.errors import EvalsuiteError

    with pytest.raises(EvalsuiteError, match="bad --budget"):
        parse_duration(value)
    assert parse_duration("10m") == 600 and parse_duration("90s") == 90 and parse_duration("2") == 2


@pytest.mark.slow
def test_a_failed_variant_never_draws_another_task(tiny, tmp_path, policy):
    other = type("OtherCopy", (BigCopyTask,), {"name": "other"})
    reg = _registry()
    reg.register("other", other)
    config = RunConfig(model="tiny", variants=VARIANTS, tasks=["copy", "other"], batch_size=8, max_samples=40,
                       round_size=20)
    store = execute(config, tmp_path / "r", False, InProcessBackend.of(tiny, seed=config.seed), progress=False,
                    log=lambda s: None, registry=reg, decide=store_decider(policy))
    assert 0 < len(store.samples("w2g32", "copy")) < 20  # FAILed (KLD) within its first look at copy ...
    assert store.samples("w2g32", "other") == []  # ... so it never ran the second
    assert len(store.samples("noop", "other")) >= 20
    assert gate_store(store, policy).gate.variant_verdicts["w2g32"] == "FAIL"


def test_pairs_to_decide_takes_the_quickest_open_check_in_task_samples():
    from evalsuite.gate.types import CheckResult, GateResult
    from evalsuite.gate.decide import pairs_to_decide

    def check(slice_, n, verdict, more):
        return CheckResult("v", "t", slice_, "max_drop", 0.05, 0.0, verdict, "", None, n, more)

    gate = GateResult(checks=[check("all", 30, "INCONCLUSIVE", 90), check("ctx=long", 10, "INCONCLUSIVE", 20),
                              check("ctx=short", 20, "PASS", None), CheckResult("w", "t", "all", "max_drop", 0.05,
                                                                                  0.0, "INCONCLUSIVE", "", None, 30,
                                                                                  500)])
    assert pairs_to_decide(gate, "v", "t") == 60  # the slice's 20 pairs at a third of the task's samples
    assert pairs_to_decide(gate, "w", "t") == 500 and pairs_to_decide(gate, "v", "other") == 0


def test_the_decision_says_which_open_checks_head_to_a_fail():
    from evalsuite.gate.decide import decision, leans_fail
    from evalsuite.gate.pooled import POOLED
    from evalsuite.gate.types import CheckResult, GateResult

    def check(task, kind, threshold, observed, more, pools=()):
        return CheckResult("v", task, "all", kind, threshold, observed, "INCONCLUSIVE", "", None, 16, more,
                           pools=pools)

    drop, near = check("needle", "max_drop", 0.05, -0.375, 2), check("json", "max_drop", 0.05, -0.01, 700)
    churn, calm = check("code", "max_flip_rate", 0.2, 0.4, 50), check("code", "max_flip_rate", 0.2, 0.1, 9)
    pooled = check(POOLED, "pooled_max_drop", 0.0, -0.09, 84, pools=(("needle", 16), ("json", 16)))
    assert [leans_fail(c) for c in (drop, near, churn, calm, pooled)] == [True, False, True, False, False]
    got = decision(GateResult(checks=[drop, near, churn, calm, pooled], variant_verdicts={"v": "INCONCLUSIVE"}))
    assert got.open == {"v": {"needle": 2, "json": 84, "code": 9}}  # json: the pooled check's share (84 x 16/16)
    assert got.failing == {"v": {"needle": 2, "code": 50}}  # code's quickest check (9) heads to a PASS


@pytest.mark.slow
def test_a_check_out_of_reach_of_max_samples_stops_drawing(tiny, tmp_path, policy):
    lines = []
    config = RunConfig(model="tiny", variants=["bf16", "w4g64"], tasks=["copy"], batch_size=8, max_samples=40,
                       round_size=20)
    store = execute(config, tmp_path / "r", False, InProcessBackend.of(tiny, seed=config.seed), progress=False,
                    log=lines.append, registry=_registry(), decide=store_decider(tmp_path / "loose.yaml"))
    meta = store.meta()
    # a near no-op needs ~57 more pairs after 20; 40 leaves 20: the first round is the last
    assert meta["drawn"]["copy"] == 20 and meta["out_of_reach"]["w4g64"]["copy"] > 20
    assert meta["stop_reason"] == "every check decided or out of reach"
    assert any("more than the cap of 40 leaves (20 drawn)" in s for s in lines)
    assert meta["stopped"]["w4g64"]["copy"].startswith("out of reach: ~")
    (check,) = [c for c in gate_store(store, tmp_path / "loose.yaml").gate.checks if c.check == "max_drop"]
    assert check.verdict == "INCONCLUSIVE" and check.more_needed == meta["out_of_reach"]["w4g64"]["copy"]


@pytest.fixture(autouse=True)
def _loose_policy(tmp_path):
    (tmp_path / "loose.yaml").write_text("defaults: {max_kld: null, max_flip_rate: null}\n")


def test_draws_fill_decode_batches_and_grow_geometrically():
    from evalsuite.run.draws import draw_size

    assert draw_size(57, 20, 8, 140) == 40  # asked 57, at most 2x the last draw (40), whole batches of 8
    assert draw_size(5, 16, 32, 500) == 32  # a small need still runs one full batch
    assert draw_size(300, 64, 32, 500) == 128 and draw_size(300, 64, 32, 70) == 70  # the cap is the cap


def test_cap_defaults_to_the_stream_size_or_1000():
    from evalsuite.run.draws import DEFAULT_CAP, task_cap
    from tests.conftest import prepared

    (task,) = prepared(BigCopyTask(), n=200)
    assert task_cap(task, None) == 200 and task_cap(task, 50) == 50
    endless = type("Endless", (BigCopyTask,), {"stream_size": lambda self, p, seed=0: None})
    (task,) = prepared(endless(), n=4)
    assert task_cap(task, None) == DEFAULT_CAP == 1000


def test_the_pooled_check_keeps_its_tasks_open():
    from evalsuite.gate.types import CheckResult, GateResult
    from evalsuite.gate.decide import pairs_to_decide

    own = [CheckResult("v", t, "all", "max_drop", 0.05, 0.0, "INCONCLUSIVE", "", None, 48, 900) for t in "ab"]
    pool = CheckResult("v", "*", "all", "pooled_max_drop", 0.0, -0.05, "INCONCLUSIVE", "", None, 96, 40,
                       (("a", 48), ("b", 48)))
    gate = GateResult(checks=own + [pool])
    assert pairs_to_decide(gate, "v", "a") == pairs_to_decide(gate, "v", "b") == 20  # its 40, shared by pairs


@pytest.mark.slow
def test_budget_alone_runs_rounds_and_a_stored_baseline_grows(tiny, tmp_path, policy):
    """A second run regenerates no stored baseline answer and asks the baseline only for new samples."""
    import json

    from evalsuite.store.records import DECODE_FORMAT

    scored: list[str] = []
    counted = type("Counted", (BigCopyTask,), {"score": lambda self, s, o: scored.append(s.id) or
                                               BigCopyTask.score(self, s, o)})
    reg = Registry()
    reg.register("copy", counted)
    root = tmp_path / "baselines"

    def go(run, cap):
        config = RunConfig(model="tiny", variants=["bf16", {"name": "noop", "spec": "bf16"}], tasks=["copy"],
                           batch_size=8, max_samples=cap, budget_s=600.0, round_size=20)
        return execute(config, tmp_path / run, False, InProcessBackend.of(tiny, seed=config.seed), progress=False,
                       log=lambda s: None, registry=reg, decide=store_decider(policy), baselines=root,
                       grow_baseline=True)

    first = go("r1", 40)  # the no-op needs ~57 more than 20 leave: one round
    stored = {r.sample_id for r in first.samples("bf16")}
    assert len(stored) == first.meta()["drawn"]["copy"] == len(scored) == 20
    scored.clear()
    second = go("r2", None)  # the cap: the stream's 200
    drawn = second.meta()["drawn"]["copy"]
    assert drawn > 20 and not stored & set(scored) and len(scored) == drawn - 20
    assert gate_store(second, policy).gate.variant_verdicts == {"noop": "PASS"}
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["decode_format"] == DECODE_FORMAT and manifest["tasks"]["copy"]["n"] == drawn
    # what a later run plans its draws past the stored samples with: the seconds per sample they took
    cost = second.meta()["round_costs"]["bf16/copy"]
    assert manifest["tasks"]["copy"]["seconds_per_sample"] == pytest.approx(cost[0] / cost[1])


@pytest.mark.slow
@pytest.mark.parametrize("args, says", [(["--max-samples", "0"], "--max-samples"),
                                        (["--budget", "0"], "bad --budget"),
                                        (["--budget", "-5m"], "bad --budget"),
                                        (["--limit", "4", "--budget", "1m"], "exclude each other")])
def test_bad_budgets_and_caps_are_one_line_exit_2(tmp_path, args, says):
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", "from evalsuite.cli import main; main()", "run", *args,
                          "--out", str(tmp_path / "runs")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 2 and says in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_variants_are_built_before_their_first_task_is_timed(tiny, tmp_path, policy, monkeypatch):
    """A variant's one-off build (quantizing its weights) is not counted as the cost of its first task's pairs."""
    from evalsuite.run.runner import Runner

    backend, events = InProcessBackend.of(tiny, seed=1234), []
    built, timed = backend.built, Runner.answer
    monkeypatch.setattr(backend, "built", lambda spec: events.append(("built", spec.name)) or built(spec))
    monkeypatch.setattr(Runner, "answer", lambda self, variants, variant, task, window: (
        events.append(("timed", variant.name)), timed(self, variants, variant, task, window))[1])
    config = RunConfig(model="tiny", variants=VARIANTS, tasks=["copy"], batch_size=8, max_samples=40, round_size=20)
    execute(config, tmp_path / "r", False, backend, progress=False, log=lambda s: None, registry=_registry(),
            decide=store_decider(policy))
    for name in ("noop", "w2g32"):
        assert events.index(("built", name)) < events.index(("timed", name))


def test_a_warm_run_plans_the_baselines_new_samples_at_what_they_cost():
    """Samples a stored baseline holds cost the baseline nothing; past them it generates, at its seconds per
    sample measured in this run (from 8 samples on), else as recorded where the stored ones were generated."""
    from evalsuite.core.costs import RunCosts, StoredBaseline

    costs = RunCosts(stored={"t": StoredBaseline(held=48, seconds=4.0)})
    costs.pairs = {"v/t": [16.0, 16]}  # the variant: 1 s a pair; the baseline generated nothing yet (imported)
    assert costs.base_seconds("t", 32, 16, "bf16") == 0.0  # samples 16-47: all stored
    assert costs.base_seconds("t", 32, 32, "bf16") == 16 * 4.0  # 32-63: 48-63 generated
    assert costs.need_seconds("v", "t", 32, 2, "bf16", 48) == 32 * 1.0 + 32 * 4.0 / 2  # shared by two variants
    costs.pairs["bf16/t"] = [1.0, 1]  # one sample when the budget cut its batch short: not trusted
    assert costs.base_seconds("t", 8, 48, "bf16") == 8 * 4.0
    costs.pairs["bf16/t"] = [16.0, 8]
    assert costs.base_seconds("t", 8, 48, "bf16") == 8 * 2.0  # measured here, from 8 samples on




def test_a_baseline_alone_draws_its_whole_first_look(tiny, tmp_path):
    """A baseline build (``make baseline``: no variant, a cap, no budget) answers every sample up to the cap, not
    only the first probing chunk."""
    config = RunConfig(model="tiny", variants=[], tasks=["copy"], batch_size=4, kld=False, max_samples=10,
                       round_size=10)
    store = execute(config, tmp_path / "r", resume=False, backend=InProcessBackend.of(tiny, seed=config.seed),
                    progress=False, log=lambda s: None, registry=_registry())
    assert len(store.done_ids("bf16", "copy")) == 10
