"""Weight variants built from the loaded baseline with optimum-quanto."""
from __future__ import annotations

import copy
import fnmatch

import torch

from evalsuite.errors import EvalsuiteError
from evalsuite.variants.spec import WeightSpec


def _qtype(spec: WeightSpec):
    from optimum.quanto import qfloat8, qint2, qint4, qint8

    if spec.fmt == "float8":
        return qfloat8
    return {8: qint8, 4: qint4, 2: qint2}[spec.bits]


def _exclude_patterns(model: torch.nn.Module, spec: WeightSpec) -> list[str]:
    """Module names matching the spec's exclude globs (lm_head by default; embeddings are never Linear)."""
    names = [n for n, _ in model.named_modules() if n]
    out = [n for n in names if any(fnmatch.fnmatch(n, pat) or n == pat for pat in spec.exclude)]
    return out


def effective_group(in_features: int, group: int) -> int:
    """The group used for a layer: ``group`` when it divides the input width, else quanto's rule (step down by
    32 to the first divisor, not below 32), as llama.cpp also falls back on tensors its block does not divide.
    E.g. SmolLM2's 576-wide layers use 96 under ``w4g128``; its 1536-wide down_proj keeps 128."""
    g = group
    while in_features % g and g > 32:
        g -= 32
    if in_features % g:
        raise EvalsuiteError(f"weight group {group} fits no divisor of input width {in_features}")
    return g


def quantize_weights(model: torch.nn.Module, spec: WeightSpec) -> torch.nn.Module:
    """Return a quantized deep copy of ``model`` (the baseline is untouched). ``fmt == 'none'`` returns it as is."""
    if spec.fmt == "none":
        return model
    from optimum.quanto import QModuleMixin, freeze, quantize

    qmodel = copy.deepcopy(model)
    with torch.no_grad():  # qint4/qint2 fail under inference_mode
        quantize(qmodel, weights=_qtype(spec), exclude=_exclude_patterns(qmodel, spec) or None)
        count = 0
        for mod in qmodel.modules():
            if isinstance(mod, QModuleMixin):
                count += 1
                if spec.group is not None:
                    mod.weight_group_size = effective_group(mod.weight.shape[-1], spec.group)
        if count == 0:
            raise EvalsuiteError(f"{spec.name}: no Linear layer was quantized (check exclude={spec.exclude})")
        freeze(qmodel)
    qmodel.eval()
    return qmodel
