"""Weight + activation quantization (``w8a8``, ``w4a8``, ``wf8af8``) with optimum-quanto.

quanto quantizes the Linear weights and the activations they read (``activations=qint8|qfloat8``) with static,
per-tensor input / output scales; the scales are calibrated by running the model on ``calib`` passages of a shipped
text (``evalsuite/data/calibration.txt``: written for this project, no third-party text; more passages than it has
are generated from a fixed seed), rendered through the chat template as prompts are, one passage at a time (no
padding in the statistics). Then the model is frozen. Deterministic: same spec, same model, same scales.
"""
from __future__ import annotations

import copy
import random
from importlib import resources
from typing import Any

import torch

from evalsuite.errors import EvalsuiteError
from evalsuite.variants.forms import WeightSpec
from evalsuite.variants.mixed import effective_group
from evalsuite.variants.quanto_route import model_routes, refusal
from evalsuite.variants.weights import exclude_names, weight_qtype

DEFAULT_CALIB = 16
CALIB_SEED = 0
MAX_CALIB_TOKENS = 256


def calibration_passages(n: int, seed: int = CALIB_SEED) -> list[str]:
    """``n`` passages: the shipped ones in a seeded order, then seeded arithmetic word problems if more are asked."""
    text = resources.files("evalsuite").joinpath("data/calibration.txt").read_text(encoding="utf-8")
    passages = [p.strip() for p in text.split("\n\n") if p.strip()]
    rng = random.Random(seed)
    rng.shuffle(passages)
    things = ["apples", "tickets", "bolts", "stamps", "boxes", "seeds", "coins", "pages"]
    while len(passages) < n:
        a, b, c, what = rng.randint(3, 90), rng.randint(2, 12), rng.randint(1, 50), rng.choice(things)
        passages.append(f"Question: There are {a} {what} in each crate and {b} crates. {c} {what} are taken out. "
                        f"How many are left? Answer: {a} times {b} is {a * b}, minus {c} is {a * b - c}.")
    return passages[:n]


def activation_qtype(spec: WeightSpec) -> Any:
    from optimum.quanto import qfloat8, qint8

    return {"int8": qint8, "float8": qfloat8}[spec.activations]


def _render(tokenizer: Any, passage: str) -> tuple[str, bool]:
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": passage}], tokenize=False,
                                             add_generation_prompt=True)
        return text, False
    return passage, True


def calibrate(model: torch.nn.Module, tokenizer: Any, n: int) -> None:
    """Run ``n`` calibration passages through a quantized (not yet frozen) model under quanto's Calibration."""
    from optimum.quanto import Calibration

    device = next(model.parameters()).device
    with torch.no_grad(), Calibration(momentum=0.9):
        for passage in calibration_passages(n):
            text, special = _render(tokenizer, passage)
            ids = tokenizer(text, add_special_tokens=special, return_tensors="pt")["input_ids"]
            model(ids[:, :MAX_CALIB_TOKENS].to(device), use_cache=False)


def quantize_with_activations(model: torch.nn.Module, spec: WeightSpec, tokenizer: Any) -> torch.nn.Module:
    """A deep copy of ``model`` with weights at ``spec`` and activations quantized, calibrated, frozen."""
    from optimum.quanto import QModuleMixin, freeze, quantize

    qmodel = copy.deepcopy(model)
    with torch.no_grad():
        quantize(qmodel, weights=weight_qtype(spec), activations=activation_qtype(spec),
                 exclude=exclude_names(qmodel, spec) or None)
        mods = [m for m in qmodel.modules() if isinstance(m, QModuleMixin)]
        if not mods:
            raise EvalsuiteError(f"{spec.name}: no Linear layer was quantized (check exclude={spec.exclude})")
        for mod in mods:
            if spec.group is not None:
                mod.weight_group_size = effective_group(mod.weight.shape[-1], spec.group)
    routes = model_routes(qmodel)
    if routes:  # calibration would take quanto's CUDA route that needs its extension (``variants.quanto_route``)
        raise refusal(spec.name, spec, routes)
    calibrate(qmodel, tokenizer, spec.calib or DEFAULT_CALIB)
    with torch.no_grad():
        freeze(qmodel)
    return qmodel.eval()
