"""The lm-eval model's ``device`` argument: loads there (lm-eval's --device or model_args), a bad one is refused."""
from __future__ import annotations

import pytest

from evalsuite.errors import EvalsuiteError


def test_lm_eval_model_loads_on_the_given_device(tiny, tmp_path):
    from evalsuite.lmeval.model import EvalsuiteLM

    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    lm = EvalsuiteLM.create_from_arg_obj({"model": str(tmp_path), "dtype": "bfloat16"}, {"device": "cpu"})
    assert lm.device.type == "cpu" and lm.built.name == "bf16"
    with pytest.raises(EvalsuiteError, match="bad --device"):
        EvalsuiteLM(model=str(tmp_path), dtype="bfloat16", device="tpu")


def test_lm_evals_default_cuda_falls_back_without_cuda_but_model_args_stay_strict(tiny, tmp_path):
    import torch

    from evalsuite.lmeval.model import EvalsuiteLM

    if torch.cuda.is_available():
        pytest.skip("the fallback is for machines without CUDA")
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    lm = EvalsuiteLM.create_from_arg_obj({"model": str(tmp_path), "dtype": "bfloat16"}, {"device": "cuda:0"})
    assert lm.device.type == "cpu"  # lm-eval's own default (cuda:0), as its HF model does
    with pytest.raises(EvalsuiteError, match="CUDA is not available"):
        EvalsuiteLM.create_from_arg_obj({"model": str(tmp_path), "dtype": "bfloat16", "device": "cuda:0"}, {})
