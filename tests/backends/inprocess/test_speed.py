"""The fixed speed probe: identical prompts for every variant; its figures replace the quality run's medians."""
import pytest

from evalsuite.backends.inprocess.inprocess import InProcessBackend
from evalsuite.backends.inprocess.speed import SpeedProbe
from tests.conftest import prepared, run_model


def test_probe_prompts_are_fixed_windows(tokenizer):
    probe = SpeedProbe(rows=3, prompt_tokens=40, new_tokens=4)
    a, b = probe.prompts(tokenizer), probe.prompts(tokenizer)
    assert a == b and len(a) == 3 and all(len(p) == 40 for p in a)
    assert a[0] != a[1]


@pytest.mark.slow
def test_variants_record_the_probe_not_the_quality_run(tiny, tmp_path):
    probe = SpeedProbe(rows=2, prompt_tokens=24, new_tokens=5)
    backend = InProcessBackend.of(tiny, speed_probe=probe)
    store = run_model(tiny, tmp_path / "r", variants=("bf16", "kv8", "w4g64"), tasks=prepared(n=3), backend=backend)
    infos = store.variant_infos()
    assert len(infos) == 3 and {"bf16", "w4g64"} <= set(infos)
    for info in infos.values():
        assert info.speed_probe == probe.to_dict()
        assert info.ttft_s > 0 and info.itl_s > 0
