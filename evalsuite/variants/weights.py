"""Weight variants built from the loaded baseline with optimum-quanto."""
from __future__ import annotations

import copy
import fnmatch

import torch

from evalsuite.errors import EvalsuiteError
from evalsuite.variants.mixed import effective_group, resolve_rules
from evalsuite.variants.spec import WeightSpec


def weight_qtype(spec: WeightSpec):
    from optimum.quanto import qfloat8, qint2, qint4, qint8

    if spec.fmt == "float8":
        return qfloat8
    return {8: qint8, 4: qint4, 2: qint2}[spec.bits]


def exclude_names(model: torch.nn.Module, spec: WeightSpec) -> list[str]:
    """Module names matching the spec's exclude globs (lm_head by default; embeddings are never Linear)."""
    names = [n for n, _ in model.named_modules() if n]
    out = [n for n in names if any(fnmatch.fnmatch(n, pat) or n == pat for pat in spec.exclude)]
    return out


def linear_names(model: torch.nn.Module) -> list[str]:
    """Dotted names of the model's Linear modules (what quanto quantizes)."""
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]


def quantize_named(model: torch.nn.Module, rules: dict[str, WeightSpec | None]) -> int:
    """Quantize (in place, not frozen) the named Linear modules of ``model`` at their rule's precision, the group
    size set per module (quanto's rule for widths it does not divide). Returns the number quantized."""
    from optimum.quanto import quantize

    by_form: dict[WeightSpec, list[str]] = {}
    for name, rule in rules.items():
        if rule is not None and rule.fmt != "none":
            by_form.setdefault(rule, []).append(name)
    for rule, names in by_form.items():
        quantize(model, weights=weight_qtype(rule), include=names)
        for name in names:
            mod = model.get_submodule(name)
            if rule.group is not None:
                mod.weight_group_size = effective_group(mod.weight.shape[-1], rule.group)
    return sum(len(n) for n in by_form.values())


def quantize_weights(model: torch.nn.Module, spec: WeightSpec) -> torch.nn.Module:
    """Return a quantized deep copy of ``model`` (the baseline is untouched). ``fmt == 'none'`` returns it as is."""
    if spec.fmt == "none":
        return model
    from optimum.quanto import QModuleMixin, freeze, quantize

    qmodel = copy.deepcopy(model)
    if spec.overrides:  # mixed precision: each Linear at the precision of the first option matching it
        with torch.no_grad():
            if quantize_named(qmodel, resolve_rules(linear_names(qmodel), spec)) == 0:
                raise EvalsuiteError(f"{spec.name}: every Linear layer is kept unquantized")
            freeze(qmodel)
        return qmodel.eval()
    with torch.no_grad():  # qint4/qint2 fail under inference_mode
        quantize(qmodel, weights=weight_qtype(spec), exclude=exclude_names(qmodel, spec) or None)
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
