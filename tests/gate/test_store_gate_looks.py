"""``StoreGate``: a run gated look after look recomputes only the (variant, task) statistics whose rows changed,
and gates as a fresh ``gate_store`` does after every look (rows of the stored sequential fixture, added in two
steps)."""
from __future__ import annotations

import shutil

from evalsuite.store.sqlite import Store
from evalsuite.gate.policy import load_policy
from evalsuite.gate.store_gate import StoreGate, gate_store
from tests.fixtures.stored_runs import RUNS, snapshot
from tests.gate.test_stored_runs import same


def test_a_look_recomputes_only_what_changed_and_gates_as_a_fresh_gate(tmp_path):
    shutil.copytree(RUNS / "sequential" / "run", tmp_path / "full")
    full = Store.open(tmp_path / "full")
    state = full.state()
    store = Store.create(tmp_path / "looks", state.config)
    store.update_state(baseline=state.baseline, variant_order=state.variant_order)
    rows, klds = full.samples(), full.kld()
    late = {(v, "other") for v in ("bf16", "noop")}  # the second look adds these (variant, task) rows
    store.put_samples([r for r in rows if (r.variant, r.task) not in late])
    store.put_kld([k for k in klds if (k.variant, k.task) not in late])
    policy = load_policy(RUNS / "sequential" / "policy.yaml")
    gate = StoreGate(policy)
    first = gate(store)
    same(snapshot(first.gate), snapshot(gate_store(store, policy).gate))
    assert gate(store).gate is first.gate  # nothing changed: nothing recomputed
    store.put_samples([r for r in rows if (r.variant, r.task) in late])
    store.put_kld([k for k in klds if (k.variant, k.task) in late])
    second = gate(store)
    same(snapshot(second.gate), snapshot(gate_store(full, policy).gate))
    kept = {(s.variant, s.task, s.slice): s for s in first.stats}
    for s in second.stats:  # untouched tasks' rows are the last look's objects; "other" (its baseline grew): new
        assert (kept.get((s.variant, s.task, s.slice)) is s) == (s.task != "other"), (s.variant, s.task, s.slice)
    store.close()
    full.close()
