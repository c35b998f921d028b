"""Sequential rounds: samples drawn round by round until the gate decides; decided variants stop; a re-gate of
the stored run gives the same verdicts; a budget stops a run that --resume continues."""
from __future__ import annotations

import pytest

from evalsuite.gate.store_gate import gate_store
from evalsuite.run.config import RunConfig
from evalsuite.run.inprocess import InProcessBackend
from evalsuite.run.pipeline import execute
from evalsuite.run.store import Store
from evalsuite.tasks.registry import Registry
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
                   log=lambda s: None, registry=_registry(), policy=policy)


def test_rounds_stop_each_variant_when_decided(tiny, tmp_path, policy):
    store = _execute(tiny, tmp_path / "r", policy)
    meta = store.meta()
    assert meta["stop_reason"] == "every check decided"
    gated = gate_store(store, policy)
    assert gated.gate.variant_verdicts == {"noop": "PASS", "w2g32": "FAIL"}
    drawn = meta["drawn"]["copy"]
    assert drawn % 20 == 0 and 60 <= drawn < 160  # a no-op needs ~77 identical pairs at max_drop 0.05
    assert len(store.samples("noop", "copy")) == drawn == len(store.samples("bf16", "copy"))
    assert len(store.samples("w2g32", "copy")) == 20  # FAILed (KLD) after the first round: no more samples
    fail = [c for c in gated.gate.checks if c.variant == "w2g32" and c.verdict == "FAIL"]
    assert fail and all(c.n == 20 for c in fail)
    again = gate_store(Store.open(store.path.parent), policy)  # re-gating the stored run reproduces every verdict
    assert [(c.check, c.verdict, c.n) for c in again.gate.checks] == [(c.check, c.verdict, c.n)
                                                                       for c in gated.gate.checks]


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


def test_rounds_take_the_cheapest_task_first(tiny, tmp_path):
    from evalsuite.run.rounds import Rounds
    from evalsuite.run.runner import Runner
    from tests.conftest import prepared

    long_task, short_task = type("Long", (CopyTask,), {"name": "long"}), type("Short", (CopyTask,), {"name": "short"})
    long = prepared(long_task(), n=4, max_new_tokens=32, stop_at_newline=False)[0]
    short = prepared(short_task(), n=4, max_new_tokens=1)[0]
    config = RunConfig(model="tiny", variants=["bf16"], tasks=["long", "short"], batch_size=4)
    runner = Runner(config, InProcessBackend.of(tiny), [long, short], Store.create(tmp_path / "r", config.to_dict()),
                    progress=False, log=lambda s: None)
    Rounds.cheapest_first(runner)
    assert [t.name for t in runner.tasks] == ["long", "short"]  # nothing measured: the configured order
    base = runner.backend.variants(["bf16"])[0]
    runner.generate(base, "bf16", 4)
    assert [runner.spent[t][1] for t in ("long", "short")] == [4, 4]  # seconds and samples measured per task
    assert runner.cost_per_sample("long") > 0
    runner.spent = {"long": [8.0, 4], "short": [1.0, 4]}  # (measured values vary; the order rule does not)
    Rounds.cheapest_first(runner)
    assert [t.name for t in runner.tasks] == ["short", "long"]
    runner.spent = {"long": [1.0, 4], "short": [8.0, 4]}
    Rounds.cheapest_first(runner)
    assert [t.name for t in runner.tasks] == ["long", "short"]


def test_a_failed_variant_skips_the_rest_of_the_round(tiny, tmp_path, policy):
    other = type("OtherCopy", (BigCopyTask,), {"name": "other"})
    reg = _registry()
    reg.register("other", other)
    config = RunConfig(model="tiny", variants=VARIANTS, tasks=["copy", "other"], batch_size=8, max_samples=40,
                       round_size=20)
    store = execute(config, tmp_path / "r", False, InProcessBackend.of(tiny, seed=config.seed), progress=False,
                    log=lambda s: None, registry=reg, policy=policy)
    assert len(store.samples("w2g32", "copy")) == 20  # FAILed (KLD) on the first task of round 1 ...
    assert store.samples("w2g32", "other") == []  # ... so it never ran the second
    assert len(store.samples("noop", "other")) >= 20
    assert gate_store(store, policy).gate.variant_verdicts["w2g32"] == "FAIL"


def test_pairs_to_decide_takes_the_quickest_open_check_in_task_samples():
    from evalsuite.gate.types import CheckResult, GateResult
    from evalsuite.run.rounds import pairs_to_decide

    def check(slice_, n, verdict, more):
        return CheckResult("v", "t", slice_, "max_drop", 0.05, 0.0, verdict, "", None, n, more)

    gate = GateResult(checks=[check("all", 30, "INCONCLUSIVE", 90), check("ctx=long", 10, "INCONCLUSIVE", 20),
                              check("ctx=short", 20, "PASS", None), CheckResult("w", "t", "all", "max_drop", 0.05,
                                                                                  0.0, "INCONCLUSIVE", "", None, 30,
                                                                                  500)])
    assert pairs_to_decide(gate, "v", "t") == 60  # the slice's 20 pairs at a third of the task's samples
    assert pairs_to_decide(gate, "w", "t") == 500 and pairs_to_decide(gate, "v", "other") == 0


def test_a_check_out_of_reach_of_max_samples_stops_drawing(tiny, tmp_path, policy):
    lines = []
    config = RunConfig(model="tiny", variants=["bf16", "w4g64"], tasks=["copy"], batch_size=8, max_samples=40,
                       round_size=20)
    store = execute(config, tmp_path / "r", False, InProcessBackend.of(tiny, seed=config.seed), progress=False,
                    log=lines.append, registry=_registry(), policy=tmp_path / "loose.yaml")
    meta = store.meta()
    # a near no-op needs ~57 more pairs after 20; 40 leaves 20: the first round is the last
    assert meta["drawn"]["copy"] == 20 and meta["out_of_reach"]["w4g64"]["copy"] > 20
    assert meta["stop_reason"] == "every check decided or out of reach of --max-samples"
    assert any("more than --max-samples 40 leaves" in s for s in lines)
    (check,) = [c for c in gate_store(store, tmp_path / "loose.yaml").gate.checks if c.check == "max_drop"]
    assert check.verdict == "INCONCLUSIVE" and check.more_needed == meta["out_of_reach"]["w4g64"]["copy"]


@pytest.fixture(autouse=True)
def _loose_policy(tmp_path):
    (tmp_path / "loose.yaml").write_text("defaults: {max_kld: null, max_flip_rate: null}\n")
