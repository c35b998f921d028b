"""RunState: the store's meta table, typed; round trip, migration of an older store, the version."""
from __future__ import annotations

import json
import sqlite3

import pytest

from evalsuite.core.config import RunConfig
from evalsuite.store.state import STATE_VERSION, RunState, field_names
from evalsuite.store.sqlite import SCHEMA_VERSION, Store, require_finished
from evalsuite.errors import EvalsuiteError


def test_round_trip_keeps_every_field_and_extra():
    state = RunState(schema_version=SCHEMA_VERSION, state_version=STATE_VERSION, config={"seed": 1}, created=2.0,
                     fingerprint="abc", baseline="bf16", variant_order=["bf16", "w4g64"], rounds=3,
                     drawn={"copy": 40}, stopped={"w4g64": {"copy": "decided (PASS)"}},
                     round_costs={"w4g64/copy": [1.5, 20]}, finished=9.0, extra={"someone_elses": [1, 2]})
    meta = json.loads(json.dumps(state.to_meta()))  # as the table stores it
    assert RunState.from_meta(meta) == state
    assert set(meta) == field_names() | {"someone_elses"}
    assert state.to_meta({"rounds", "drawn"}) == {"rounds": 3, "drawn": {"copy": 40}}


def test_an_old_meta_migrates_missing_keys_default_and_unknown_kept():
    old = {"schema_version": 2, "config": {"tasks": ["copy"]}, "created": 1.0, "fingerprint": "f",
           "variant_order": ["bf16", "v"], "wall_seconds": 12}  # no state_version, baseline, rounds, ...
    state = RunState.from_meta(old)
    assert state.state_version == 0 < STATE_VERSION
    assert state.baseline == "bf16" and state.rounds == 0 and state.stop_reason == "" and state.drawn == {}
    assert state.finished is None and state.verify == {} and state.variant_order == ["bf16", "v"]
    assert state.extra == {"wall_seconds": 12}
    assert state.to_meta()["wall_seconds"] == 12  # nothing stored is lost


def test_store_writes_and_reads_the_state(tmp_path):
    store = Store.create(tmp_path / "r", RunConfig(tasks=["copy"]).to_dict())
    state = store.state()
    assert state.state_version == STATE_VERSION and state.schema_version == SCHEMA_VERSION
    assert state.config["tasks"] == ["copy"] and store.config == state.config and state.created
    store.update_state(rounds=2, drawn={"copy": 16})
    assert store.meta()["rounds"] == 2 and store.state().drawn == {"copy": 16}  # the same key/value table
    with pytest.raises(TypeError, match="no field"):
        store.update_state(round=2)
    with pytest.raises(EvalsuiteError, match="did not finish"):
        require_finished(store)
    store.update_state(finished=1.0)
    require_finished(store)
    store.close()


def test_a_store_written_before_the_state_opens_and_migrates(tmp_path):
    store = Store.create(tmp_path / "r", {"tasks": ["copy"]})
    store.close()
    with sqlite3.connect(tmp_path / "r" / Store.FILENAME) as conn:  # as an older evalsuite left it
        conn.execute("DELETE FROM meta WHERE key='state_version'")
        conn.execute("INSERT INTO meta VALUES ('legacy_key', ?)", (json.dumps({"x": 1}),))
    again = Store.open(tmp_path / "r")
    state = again.state()
    assert state.state_version == 0 and state.extra == {"legacy_key": {"x": 1}} and state.baseline == "bf16"
    again.close()


def test_config_ignores_retired_keys_and_refuses_limit_with_rounds():
    stored = {**RunConfig().to_dict(), "baselines_dir": "/somewhere"}  # a config stored before it was retired
    assert RunConfig.from_dict(stored) == RunConfig()
    with pytest.raises(EvalsuiteError, match="--limit .* and --max-samples .* exclude each other"):
        RunConfig(limit=4, max_samples=40)
    with pytest.raises(EvalsuiteError, match="--limit .* and --budget .* exclude each other"):
        RunConfig(limit=4, budget_s=60.0)
