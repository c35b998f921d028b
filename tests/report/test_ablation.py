"""Ablation on the tiny model: one shared baseline, bytes on the right axis, Pareto front, files written."""
import json

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.gate.store_gate import gate_store
from evalsuite.report.ablation import ablation_points, expand_sweep, write_ablation
from tests.conftest import prepared, run_model


def test_expand_sweep():
    assert expand_sweep("w4g{32,64,128,256}") == ["w4g32", "w4g64", "w4g128", "w4g256"]
    assert expand_sweep("kv{4,2}g{16,32}") == ["kv4g16", "kv4g32", "kv2g16", "kv2g32"]
    with pytest.raises(EvalsuiteError):
        expand_sweep("w4g{32")


@pytest.mark.slow
def test_ablation_on_tiny_model(tiny, tmp_path):
    variants = ["bf16"] + expand_sweep("w4g{32,64}") + expand_sweep("kv{4,2}g16r16pq")
    store = run_model(tiny, tmp_path / "abl", variants, tasks=prepared(n=4, seed=0, stop_at_newline=False))
    points = ablation_points(gate_store(store), store.variant_infos())
    by = {(p.variant, p.axis): p for p in points}
    assert by[("w4g32", "weight_bytes")].bytes > by[("w4g64", "weight_bytes")].bytes
    assert by[("kv2g16r16pq", "kv_bytes_per_token")].bytes < by[("kv4g16r16pq", "kv_bytes_per_token")].bytes
    assert ("bf16", "weight_bytes") in by and ("bf16", "kv_bytes_per_token") in by  # one shared baseline
    assert by[("kv2g16r16pq", "kv_bytes_per_token")].kld > by[("kv4g16r16pq", "kv_bytes_per_token")].kld
    # the cheapest point on each axis is always on the Pareto front
    for axis in ("weight_bytes", "kv_bytes_per_token"):
        cheapest = min((p for p in points if p.axis == axis), key=lambda p: p.bytes)
        assert cheapest.pareto
    files = write_ablation(points, tmp_path / "out")
    names = {f.name for f in files}
    assert {"ablation.json", "ablation.md", "ablation_copy_weight_bytes.png"} <= names
    assert len(json.loads((tmp_path / "out" / "ablation.json").read_text())) == len(points)
    assert (tmp_path / "out" / "ablation_copy_weight_bytes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
