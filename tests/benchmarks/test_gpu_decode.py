"""benchmarks/gpu/gpu_decode.py in its tiny CPU mode: the table has every (row, context) and the plan's prediction."""
from __future__ import annotations

import importlib

import pytest


@pytest.fixture(scope="module")
def gpu_decode():
    return importlib.import_module("benchmarks.gpu.gpu_decode")


def _table_rows(table: str) -> list[list[str]]:
    lines = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| row ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


@pytest.mark.slow
def test_tiny_cpu_table_has_every_row_and_the_plan_column(gpu_decode, tmp_path, monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    out = tmp_path / "decode.md"
    table = gpu_decode.main(["--tiny", "--device", "cpu", "--contexts", "32,96", "--decode-tokens", "2",
                             "--out", str(out)])
    assert out.read_text().strip() == table.strip()
    rows = _table_rows(table)
    labels = [label for label, *_ in gpu_decode.ROWS]
    if gpu_decode.has_packed_path():
        labels.append("bf16 + kv4 (packed, no shadow)")
    else:
        assert "no packed decode path" in table
    assert [(r[0], r[1]) for r in rows] == [(label, ctx) for ctx in ("32", "96") for label in labels]
    for r in rows:
        assert r[5].endswith("x") and float(r[5][:-1]) > 0, r  # the plan's prediction is filled
        assert float(r[2]) > 0 and float(r[6]) > 0
    reference = [r for r in rows if r[0] == gpu_decode.ROWS[0][0]]
    assert all(r[4] == "1.00x" and r[5] == "1.00x" for r in reference)


def test_plan_predicts_w4_faster_and_kv_gain_growing_with_context(gpu_decode):
    short = gpu_decode.predictions(gpu_decode.LLAMA3_8B, gpu_decode.ROWS, 4096, 1)
    long = gpu_decode.predictions(gpu_decode.LLAMA3_8B, gpu_decode.ROWS, 32768, 1)
    assert short[("bf16", "bf16")] == pytest.approx(1.0)
    assert short[("w4g128", "bf16")] > 2.5  # ~16 GB of bf16 weights vs ~4.5 GB at 4 bits
    assert 1.0 < short[("bf16", "kv4g32")] < long[("bf16", "kv4g32")]
    assert long[("bf16", "kv8")] < long[("bf16", "kv4g32")]
