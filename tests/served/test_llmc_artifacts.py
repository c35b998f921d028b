"""llm-compressor artifacts of the embedded model (W8A8-INT8, W4A16), made by the recipe in its own venv
(``make llmc``), then checked as evalsuite gates them: the ``ckpt:`` spec, the tokenizer pairing and the bytes."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from evalsuite.served.vllm.specs import parse_served

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[2]
LLMC_PYTHON = os.environ.get("EVALSUITE_LLMC_PYTHON", str(ROOT / ".venv-llmc" / "bin" / "python"))


@pytest.fixture(scope="session")
def artifacts(base_folder: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both schemes made once per session."""
    out = tmp_path_factory.mktemp("llmc")
    made = {}
    for scheme in ("w8a8", "w4a16"):
        target = out / f"smol-{scheme}"
        subprocess.run([LLMC_PYTHON, str(ROOT / "evalsuite" / "served" / "llmc_recipe.py"), "--model", base_folder,
                        "--scheme", scheme, "--out", str(target)], check=True, capture_output=True, timeout=900)
        made[scheme] = target
    return made


@pytest.mark.parametrize("scheme, fmt, bits", [("w8a8", "int-quantized", 8), ("w4a16", "pack-quantized", 4)])
def test_artifact_is_compressed_tensors(artifacts: dict, base_folder: str, scheme: str, fmt: str,
                                        bits: int) -> None:
    from transformers import AutoTokenizer

    from evalsuite.served.vllm.sizes import served_weight_bytes
    from evalsuite.variants.artifact import pairing_problem

    folder = artifacts[scheme]
    q = json.loads((folder / "config.json").read_text())["quantization_config"]
    assert q["quant_method"] == "compressed-tensors" and q["format"] == fmt
    assert q["config_groups"]["group_0"]["weights"]["num_bits"] == bits
    spec = parse_served(f"ckpt:{folder}", base_folder)
    assert spec.artifact == str(folder.resolve()) and spec.name == folder.name
    exact, _ = served_weight_bytes(spec)
    base_bf16, _ = served_weight_bytes(parse_served("bf16", base_folder))
    assert 0 < exact < base_bf16  # the artifact's own tensor bytes, smaller than bf16
    assert pairing_problem(AutoTokenizer.from_pretrained(base_folder), AutoTokenizer.from_pretrained(folder)) is None
