"""`evalsuite compare` on evalsuite run folders (tiny model, toy task): the baseline of one run against the variants
of another or the same; KLD and the variants' bytes come along only where they are valid."""
from __future__ import annotations

import pytest

from evalsuite.store.sqlite import Store
from evalsuite.gate.store_gate import gate_store

KV = "kv2g32r16"


@pytest.fixture(scope="module")
def runs(tiny_lm, tmp_path_factory):
    """Two finished evalsuite runs of the same 8 toy samples: bf16 + KV variant (with KLD), and bf16 + two
    variants (without)."""
    from evalsuite.backends.inprocess.inprocess import InProcessBackend
    from evalsuite.backends.inprocess.speed import SpeedProbe
    from tests.conftest import prepared, run_model

    def backend():  # a speed probe of one short row: its figures are not what these tests are about
        return InProcessBackend.of(tiny_lm, seed=1234, speed_probe=SpeedProbe(rows=1, prompt_tokens=8, new_tokens=2))

    root = tmp_path_factory.mktemp("evalsuite_runs")
    one = run_model(tiny_lm, root / "one", ("bf16", KV), tasks=prepared(n=8), batch_size=8, backend=backend())
    two = run_model(tiny_lm, root / "two", ("bf16", "kv4g32r16", KV), tasks=prepared(n=8), batch_size=8, kld=False,
                    backend=backend())
    one.close()
    two.close()
    return root / "one", root / "two"


def rows(run) -> dict:
    store = Store.open(run)
    try:
        return {(s.variant, s.task, s.slice): s for s in gate_store(store).stats}
    finally:
        store.close()


def test_a_run_compared_with_itself_keeps_its_stats_kld_and_bytes(runs, cli, tmp_path):
    one, _ = runs
    code, out, err = cli("compare", one, one, "--run-id", "same", "--no-report")
    assert code in (0, 1) and err == ""
    again = tmp_path / "runs" / "same"
    assert rows(again) == rows(one)  # the same pairs, scores, slices and KLD
    a, b = Store.open(one), Store.open(again)
    assert b.variant_infos()[KV] == a.variant_infos()[KV]  # its bytes and speed: tenants can rank it
    assert b.state().kld_method == "as the evalsuite run measured it"
    a.close(), b.close()


def test_variants_of_another_run_pair_by_prompt_and_drop_their_kld(runs, cli, tmp_path):
    one, two = runs
    code, out, _ = cli("compare", f"base={two}", one, "--run-id", "x", "--no-report")
    assert code in (0, 1)
    assert f"{KV}: its KLD rows were measured against its own run's baseline, not base's: not carried over" in out
    stats = rows(tmp_path / "runs" / "x")
    assert {(v, s.n, s.n_unpaired, s.kld_mean) for (v, _, sl), s in stats.items() if sl == "all"} == \
        {(KV, 8, 0, None)}


def test_name_renames_only_a_runs_single_variant(runs, cli):
    one, two = runs
    assert cli("compare", one, f"kv={one}", "--run-id", "r", "--no-report")[0] in (0, 1)
    code, _, err = cli("compare", one, f"kv={two}", "--run-id", "r2")
    assert code == 2 and "holds 2 variants (kv4g32r16, kv2g32r16): NAME=PATH renames a run's only variant" in err
