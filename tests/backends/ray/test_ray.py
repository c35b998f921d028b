"""Ray fan-out: same per-sample results as the in-process runner, and a killed worker's unit is retried once."""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import prepared, run_model
from tests.toytask import CopyTask

VARIANTS = ["bf16", "w8", "kv4g32r16"]


@dataclass(frozen=True)
class TinyFactory:
    """Picklable: every Ray worker builds the same tiny random model (fixed seed) with the real tokenizer."""

    seed: int = 0

    def __call__(self):
        from transformers import AutoTokenizer

        from evalsuite.models import wrap_model
        from evalsuite.models.embedded import converted_folder, embedded_gguf
        from tests.conftest import make_tiny_model

        tok = AutoTokenizer.from_pretrained(str(converted_folder(embedded_gguf())))
        return wrap_model(make_tiny_model(len(tok), seed=self.seed), tok, name="tiny")


class CrashOnceTask(CopyTask):
    """CopyTask whose scorer SIGKILLs its own process the first time it sees ``copy-3`` (marker file)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def score(self, sample, output):
        if sample.id == "copy-3" and not os.path.exists(self.marker):
            Path(self.marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().score(sample, output)


@pytest.mark.slow
def test_nothing_imports_ray_without_flag():
    code = ("import sys, evalsuite.run.pipeline, evalsuite.run.runner, evalsuite.cli.run_cmd, evalsuite.cli.backends; "
            "assert 'ray' not in sys.modules and not any(m.startswith('evalsuite.backends.ray') for m in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.server  # a local Ray instance
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed (pip install '.[ray]')")
def test_ray_matches_in_process_and_survives_killed_worker(tmp_path):
    from evalsuite.backends.ray.ray_backend import RayBackend

    ref = run_model(TinyFactory()(), tmp_path / "ref", VARIANTS, batch_size=8)
    marker = tmp_path / "killed-once"
    backend = RayBackend(TinyFactory(), num_cpus=2)
    try:
        store = run_model(None, tmp_path / "ray", VARIANTS, tasks=prepared(CrashOnceTask(str(marker))),
                          batch_size=8, backend=backend)
    finally:
        backend.close()
    assert marker.exists()  # a worker really died mid-run
    for v in VARIANTS:
        got, want = store.samples(v), ref.samples(v)
        assert len({r.sample_id for r in got}) == len(got) == 6
        key = lambda r: r.sample_id  # noqa: E731
        assert [(r.sample_id, r.output, r.score) for r in sorted(got, key=key)] == \
               [(r.sample_id, r.output, r.score) for r in sorted(want, key=key)]
    for v in VARIANTS[1:]:
        got = {k.sample_id: k for k in store.kld(v)}
        want = {k.sample_id: k for k in ref.kld(v)}
        assert got.keys() == want.keys() and len(got) == 6
        assert all(got[s].n_tokens == want[s].n_tokens and got[s].top1_agree == want[s].top1_agree for s in got)
        assert all(abs(got[s].mean - want[s].mean) < 1e-4 for s in got)
    infos = store.variant_infos()
    assert set(infos) == set(VARIANTS) and infos["w8"].weight_bytes < infos["bf16"].weight_bytes
    assert store.meta()["fingerprint"] == ref.meta()["fingerprint"] and "finished" in store.meta()
