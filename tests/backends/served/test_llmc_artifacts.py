"""llm-compressor artifacts of the embedded model (W8A8-INT8, W4A16), made by the recipe in its own venv
(``make llmc``), then checked as evalsuite gates them: the ``ckpt:`` spec, the tokenizer pairing and the bytes."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from evalsuite.backends.served.vllm.specs import parse_served

pytestmark = pytest.mark.llmc
ROOT = Path(__file__).resolve().parents[3]
LLMC_PYTHON = os.environ.get("EVALSUITE_LLMC_PYTHON", str(ROOT / ".venv-llmc" / "bin" / "python"))


@pytest.fixture(scope="session")
def llmc_artifacts(base_folder: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both schemes made once per session (a missing venv or a failed recipe fails, with its last line)."""
    if not Path(LLMC_PYTHON).is_file():
        pytest.fail(f"no llm-compressor venv ({LLMC_PYTHON}): run `make llmc`", pytrace=False)
    out = tmp_path_factory.mktemp("llmc")
    made = {}
    for scheme in ("w8a8", "w4a16"):
        target = out / f"smol-{scheme}"
        p = subprocess.run([LLMC_PYTHON, str(ROOT / "evalsuite" / "variants" / "llmc_recipe.py"), "--model",
                            base_folder, "--scheme", scheme, "--out", str(target)], capture_output=True, text=True,
                           timeout=900)
        if p.returncode != 0:
            pytest.fail(f"llmc_recipe --scheme {scheme} exited {p.returncode}: "
                        f"{(p.stderr.strip().splitlines() or ['no output'])[-1]}", pytrace=False)
        made[scheme] = target
    return made


@pytest.mark.parametrize("scheme, fmt, bits", [("w8a8", "int-quantized", 8), ("w4a16", "pack-quantized", 4)])
def test_artifact_is_compressed_tensors(llmc_artifacts: dict, base_folder: str, scheme: str, fmt: str,
                                        bits: int) -> None:
    from transformers import AutoTokenizer

    from evalsuite.backends.served.vllm.sizes import served_weight_bytes
    from evalsuite.variants.artifact import pairing_problem

    folder = llmc_artifacts[scheme]
    q = json.loads((folder / "config.json").read_text())["quantization_config"]
    assert q["quant_method"] == "compressed-tensors" and q["format"] == fmt
    assert q["config_groups"]["group_0"]["weights"]["num_bits"] == bits
    spec = parse_served(f"ckpt:{folder}", base_folder)
    assert spec.artifact == str(folder.resolve()) and spec.name == folder.name
    exact, _ = served_weight_bytes(spec)
    base_bf16, _ = served_weight_bytes(parse_served("bf16", base_folder))
    assert 0 < exact < base_bf16  # the artifact's own tensor bytes, smaller than bf16
    assert pairing_problem(AutoTokenizer.from_pretrained(base_folder), AutoTokenizer.from_pretrained(folder)) is None


def test_artifacts_gate_in_process(llmc_artifacts: dict, tmp_path: Path) -> None:
    """``ckpt:`` compressed-tensors artifacts gated in-process (transformers + compressed-tensors in evalsuite's
    venv): both load, generate, and get teacher-forced KLD rows against the bf16 baseline."""
    from evalsuite.cli.backends import make_backend
    from evalsuite.core.config import RunConfig
    from evalsuite.store.sqlite import Store
    from evalsuite.run.pipeline import execute

    names = {s: f"llmc-{s}" for s in llmc_artifacts}
    config = RunConfig(variants=[f"ckpt:{llmc_artifacts[s]}#{names[s]}" for s in llmc_artifacts],
                       tasks=["reasoning"], limit=2, batch_size=2)
    run_dir = tmp_path / "run"
    execute(config, run_dir, False, make_backend(config, run_dir), progress=False, log=lambda _: None).close()
    store = Store.open(run_dir)
    for scheme, name in names.items():
        assert len(store.samples(name, "reasoning")) == 2
        rows = store.kld(name)
        assert len(rows) == 2 and all(r.n_tokens > 0 for r in rows)
        mean = sum(sum(r.token_kld) for r in rows) / sum(r.n_tokens for r in rows)
        assert mean > 0, scheme  # quantized: not the baseline
