"""``--device``: resolving the spelling, placing a model, recording the device (CPU-side; CUDA in test_device_cuda)."""
from __future__ import annotations

import pytest
import torch

from evalsuite.errors import EvalsuiteError
from evalsuite.models.device import device_name, parse_device, resolve_device, synchronize

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")


def test_auto_is_cuda_when_present_else_cpu():
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == want and resolve_device(None).type == want
    assert resolve_device(" CPU ") == torch.device("cpu")


@no_cuda
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_cuda_is_a_one_line_error(spec):
    with pytest.raises(EvalsuiteError, match="CUDA is not available") as err:
        resolve_device(spec)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:-1", "cuda:x", "mps", "cpu:0", "cuda 0"])
def test_garbage_is_refused(spec):
    with pytest.raises(EvalsuiteError, match="bad --device"):
        resolve_device(spec)
    with pytest.raises(EvalsuiteError, match="bad --device"):
        parse_device(spec)


def test_index_out_of_range_and_in_range(monkeypatch):
    """With (pretend) CUDA and one GPU: cuda:0 resolves, cuda:1 is refused naming the GPUs there are."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    assert resolve_device("auto") == torch.device("cuda", 0)
    with pytest.raises(EvalsuiteError, match=r"no such GPU .*cuda:0\.\.cuda:0"):
        resolve_device("cuda:1")


def test_parse_device_needs_no_gpu():
    assert parse_device("CUDA:2") == "cuda:2" and parse_device(None) == "auto"


def test_device_names_and_cpu_synchronize_is_a_no_op():
    assert device_name(torch.device("cpu")) == "cpu"
    assert device_name(torch.device("cuda")) == "cuda:0" and device_name("cuda:3") == "cuda:3"
    synchronize(torch.device("cpu"))
    synchronize(None)
    if not torch.cuda.is_available():
        synchronize("cuda:0")  # nothing to wait for: no error either


def test_placement_cpu_is_unchanged_and_gpu_depends_on_free_memory(monkeypatch, tmp_path):
    """CPU: no from_pretrained keywords (as before). GPU: the whole model on it when it fits, else device_map auto."""
    from evalsuite.models import loader

    assert loader.placement(tmp_path, torch.device("cpu"), torch.bfloat16) == {}
    monkeypatch.setattr(loader, "weights_nbytes", lambda source, dtype: 1000)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2000, 4000))
    assert loader.placement(tmp_path, torch.device("cuda", 1), torch.bfloat16) == {"device_map": {"": 1}}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1050, 4000))  # under 10% headroom
    assert loader.placement(tmp_path, torch.device("cuda", 0), torch.bfloat16) == {"device_map": "auto"}


def test_weights_nbytes_counts_the_params_at_the_dtype(tiny, tmp_path):
    from evalsuite.models.loader import weights_nbytes

    tiny.model.config.save_pretrained(tmp_path)
    n = sum(p.numel() for p in tiny.model.parameters())
    assert weights_nbytes(tmp_path, torch.bfloat16) == 2 * n
    assert weights_nbytes(tmp_path, torch.float32) == 4 * n
    assert weights_nbytes(tmp_path / "missing", torch.bfloat16) is None


def test_load_model_on_cpu_records_the_device(tiny, tmp_path):
    from evalsuite.models.loader import ModelFactory, load_model

    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path), "bfloat16", "cpu")
    assert loaded.meta["device"] == "cpu" and loaded.model.device.type == "cpu"
    assert loaded.fingerprint == tiny.fingerprint  # placement does not change the weights
    again = ModelFactory(str(tmp_path), "bfloat16", "cpu")()
    assert again.fingerprint == tiny.fingerprint and again.meta["device"] == "cpu"
    with pytest.raises(EvalsuiteError, match="bad --device"):
        load_model(str(tmp_path), "bfloat16", "gpu")


def test_settings_and_run_config_record_the_device(tiny):
    from evalsuite.core.config import RunConfig
    from evalsuite.backends.inprocess.inprocess import InProcessBackend

    assert tiny.meta["device"] == "cpu"
    assert InProcessBackend.of(tiny).settings()["device"] == "cpu"
    assert RunConfig().device == "auto"
    old = {k: v for k, v in RunConfig().to_dict().items() if k != "device"}
    assert RunConfig.from_dict(old).device == "cpu"  # stored before --device existed: it ran on the CPU
    assert RunConfig.from_dict({**old, "device": "cuda:1"}).device == "cuda:1"
