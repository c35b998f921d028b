"""Loading a model by hub id reads the local Hugging Face cache only, per call (``local_files_only``): nothing is
set in ``os.environ`` (huggingface_hub reads ``HF_HUB_OFFLINE`` once, at its import, so setting it at load time
neither kept the process offline nor left the caller's environment alone)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.models.loader import ModelFactory, hub_options, load_tokenizer

HUB_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
MISSING = "evalsuite-tests/no-such-model"  # in no cache


def test_a_hub_id_not_in_the_cache_is_one_line_and_no_variable_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in HUB_VARS:
        monkeypatch.delenv(var, raising=False)
    for load in (ModelFactory(MISSING, device="cpu"), lambda: load_tokenizer(MISSING)):
        with pytest.raises(EvalsuiteError) as exc:
            load()
        assert MISSING in str(exc.value) and "\n" not in str(exc.value) and exc.value.exit_code == 2
    assert not [v for v in HUB_VARS if v in os.environ]


def test_a_user_may_allow_the_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert hub_options(MISSING) == {"local_files_only": True}
    assert hub_options(Path("/some/folder")) == {}
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert hub_options(MISSING) == {}
