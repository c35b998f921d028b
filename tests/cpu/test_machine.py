"""cpu.machine: the CPU a run ran on (model, kernel flags, cores) and its fp32 matmul speed class."""
from __future__ import annotations

import json

from evalsuite.cpu.machine import (KERNEL_FLAGS, cpu_flags, cpu_model, machine_info, machine_text, speed_class)
from evalsuite.store.state import RunState

CPUINFO = ("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
           "flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512bw avx512_bf16 amx_bf16 amx_tile\n\n"
           "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu avx2\n")


def test_machine_info_has_the_keys_with_sane_types(tmp_path):
    info = machine_info()
    assert set(info) == {"cpu", "flags", "cores", "gflops", "speed_class"}
    assert isinstance(info["cpu"], str) and info["cpu"]
    assert isinstance(info["flags"], list) and set(info["flags"]) <= set(KERNEL_FLAGS)
    assert isinstance(info["cores"], int) and info["cores"] >= 1
    assert isinstance(info["gflops"], float) and info["gflops"] > 0
    assert info["speed_class"] == speed_class(info["gflops"])
    assert json.loads(json.dumps(info)) == info  # what the meta table stores
    other_os = machine_info(tmp_path / "no-cpuinfo")  # no /proc/cpuinfo: no flags, a name all the same
    assert other_os["flags"] == [] and other_os["cpu"] and other_os["gflops"] > 0


def test_cpuinfo_parsing_keeps_the_kernel_flags_in_order():
    assert cpu_model(CPUINFO) == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu_flags(CPUINFO) == ["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"]  # the first CPU's
    assert cpu_flags("processor\t: 0\nflags\t: fpu sse2\n") == [] and cpu_flags("") == []


def test_speed_classes_rise_with_the_figure():
    classes = [speed_class(g) for g in (5.0, 99.9, 100.0, 499.0, 500.0, 5000.0)]
    assert classes == ["slow", "slow", "medium", "medium", "fast", "fast"]


def test_machine_text_and_a_state_with_and_without_it():
    info = {"cpu": "Intel Xeon", "flags": ["avx2", "fma"], "cores": 2, "gflops": 38.4, "speed_class": "slow"}
    assert machine_text(info) == "CPU: Intel Xeon, 2 cores, avx2 fma, 38 GFLOP/s fp32 (slow class)"
    assert machine_text(None) == "" and machine_text({}) == ""
    state = RunState.from_meta({"schema_version": 2, "machine": info})
    assert state.machine == info and "machine" not in state.extra
    assert RunState.from_meta({"schema_version": 2}).machine == {}  # an older meta: none, no error
