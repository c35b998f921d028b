"""benchmarks/throughput/gate_time.py's store readers: decode-path shares and verified-vs-regenerated agreement (no
model)."""
from __future__ import annotations

import importlib

import pytest


@pytest.fixture(scope="module")
def gate_time():
    return importlib.import_module("benchmarks.throughput.gate_time")


def _row(variant, sid, output="a", decode=None, where="column"):
    row = {"variant": variant, "task": "json", "sample_id": sid, "output": output, "metadata": {}, "metrics": {}}
    if decode is not None and where == "column":
        row["decode"] = decode
    elif decode is not None:
        row["metadata"]["decode"] = decode
    return row


def test_decode_shares_per_variant_skip_the_baseline_and_read_metadata(gate_time):
    rows = [_row("bf16", "1", decode="generated"), _row("w4", "1", decode="verified"),
            _row("w4", "2", decode="diverged@7"), _row("kv4", "1", decode="regenerated", where="metadata"),
            _row("kv4", "2", decode="verified"), _row("bf16@noise", "1", decode="generated")]
    lines = gate_time.decode_table({"baseline": "bf16"}, rows)
    assert lines[0].split("|")[4:-1] == [" verified ", " diverged ", " regenerated "]  # "generated": only if seen
    body = {tuple(c.strip() for c in line.strip("|").split("|")[:2]): line for line in lines[2:]}
    assert set(body) == {("kv4", "json"), ("w4", "json"), ("kv4", "**all**"), ("w4", "**all**")}
    assert "| 2 | 50% | 50% | 0% |" in body[("w4", "json")]
    assert "| 2 | 50% | 0% | 50% |" in body[("kv4", "json")]


def test_stores_without_a_decode_field_say_so(gate_time):
    lines = gate_time.decode_table({}, [_row("bf16", "1"), _row("w4", "1"), _row("w4", "2", decode="")])
    assert len(lines) == 1 and "no `decode` field" in lines[0]


def test_identical_rate_of_verified_against_regenerated(gate_time):
    on = [_row("w4", "1", "x", "verified"), _row("w4", "2", "y", "verified"), _row("w4", "3", "z", "diverged@2")]
    off = [_row("w4", "1", "x", "generated"), _row("w4", "2", "other", "generated"), _row("w4", "3", "z")]
    lines = gate_time.identical_table(on, off)
    assert "| w4 | verified | 2 | 1/2 (50.0%) |" in lines
    assert "| w4 | diverged | 1 | 1/1 (100.0%) |" in lines
    assert "no verify-on rows" in gate_time.identical_table([_row("w4", "1")], off)[0]
