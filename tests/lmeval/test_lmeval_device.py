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
