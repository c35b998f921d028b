"""Weight variants built from the loaded baseline with optimum-quanto."""
from __future__ import annotations

import copy
import fnmatch

import torch

from evalsuite.errors import EvalsuiteError
from evalsuite.variants.forms import WeightSpec
from evalsuite.variants.mixed import effective_group, resolve_rules


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


def freeze_routed(model: torch.nn.Module, spec: WeightSpec, kernels: str = "quanto") -> int:
    """quanto's ``freeze``, except that on a GPU a layer whose quanto route needs the ``quanto_cuda`` extension
    (``variants.quanto_route``) is frozen on the CPU under ``kernels="dequantized"`` (``dequantize_linears`` then
    unpacks it there and puts it back), and refused under ``kernels="quanto"``. Returns the layers moved."""
    from optimum.quanto import freeze

    from evalsuite.variants.quanto_route import model_routes, refusal, refused

    routes = model_routes(model)
    if routes and refused(spec, kernels):
        raise refusal(spec.name, spec, routes)
    for name in routes:
        model.get_submodule(name).to("cpu")
    freeze(model)
    return len(routes)


def quantize_weights(model: torch.nn.Module, spec: WeightSpec, kernels: str = "quanto") -> torch.nn.Module:
    """Return a quantized deep copy of ``model`` (the baseline is untouched). ``fmt == 'none'`` returns it as is.
    ``kernels``: how its layers will run (``variants.build.KERNELS``; see ``freeze_routed``)."""
    if spec.fmt == "none":
        return model
    from optimum.quanto import QModuleMixin, quantize

    qmodel = copy.deepcopy(model)
    if spec.overrides:  # mixed precision: each Linear at the precision of the first option matching it
        with torch.no_grad():
            if quantize_named(qmodel, resolve_rules(linear_names(qmodel), spec)) == 0:
                raise EvalsuiteError(f"{spec.name}: every Linear layer is kept unquantized")
            freeze_routed(qmodel, spec, kernels)
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
        freeze_routed(qmodel, spec, kernels)
    qmodel.eval()
    return qmodel


def dequantize_linears(model: torch.nn.Module, like: torch.nn.Module | None = None) -> int:
    """Replace, in place, every weight-only quanto ``QLinear`` of a frozen model with a plain ``nn.Linear`` holding
    ``qweight.dequantize()`` (exactly the values quanto's own CPU path multiplies by) in the module's dtype.

    Why: quanto re-dequantizes the packed weights at every forward, which doubles a decode step's cost on CPU; a
    quality run only needs the quantized *values*. Trade: the copy holds the weights unpacked (the baseline's
    float bytes, not the packed ones), so byte figures must be measured before this is called. Modules that also
    quantize activations (W8A8 ...) are left as they are. Each new Linear goes where ``like``'s module of the same
    name (the baseline) holds its weight, else where the quantized weights are: a layer ``freeze_routed`` froze on
    the CPU is unpacked there and goes back to its GPU. Returns the number of modules replaced."""
    from optimum.quanto import QModuleMixin

    replaced = 0
    for name, mod in list(model.named_modules()):
        if not (isinstance(mod, QModuleMixin) and isinstance(mod, torch.nn.Linear)) \
                or mod.weight_qtype is None or mod.activation_qtype is not None:
            continue
        home = _home(like, name) or mod.qweight.device
        with torch.no_grad():
            w = mod.qweight.dequantize()
            lin = torch.nn.Linear(mod.in_features, mod.out_features, bias=mod.bias is not None,
                                  device=home, dtype=w.dtype)
            lin.weight = torch.nn.Parameter(w.detach().to(home, copy=True), requires_grad=False)
            if mod.bias is not None:
                lin.bias = torch.nn.Parameter(mod.bias.detach().to(home, copy=True), requires_grad=False)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, lin)
        replaced += 1
    return replaced


def _home(like: torch.nn.Module | None, name: str) -> torch.device | None:
    """Where ``like``'s module ``name`` holds its weight (None: no such module, or its weight is not materialized)."""
    try:
        weight = like.get_submodule(name).weight if like is not None else None
    except AttributeError:
        return None
    return weight.device if isinstance(weight, torch.Tensor) and weight.device.type != "meta" else None
