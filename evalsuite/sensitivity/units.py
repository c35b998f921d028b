"""Units of sensitivity (a decoder layer, or one Linear module) and their quantized copies, swapped in and out.

Each unit's Linear modules are deep-copied and quantized on their own (optimum-quanto ``quantize`` + ``freeze``,
the group size set per module as the variant builder does); swapping them into the baseline model quantizes only
that unit, and every swap is undone on exit, so the baseline is left as it was.
"""
from __future__ import annotations

import copy
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import torch

from evalsuite.errors import EvalsuiteError
from evalsuite.variants.mixed import resolve_rules
from evalsuite.variants.spec import WeightSpec
from evalsuite.variants.weights import linear_names, quantize_named

_LAYER_NAME = re.compile(r"(?:^|\.)layers\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class Unit:
    """A unit: its spec pattern (``l3`` / ``l3.mlp.down_proj``), decoder layer, and Linear module names."""

    pattern: str
    layer: int
    modules: tuple[str, ...]


def weight_units(model: Any, spec: WeightSpec, kind: str = "layer") -> list[Unit]:
    """Units over the Linear modules ``spec`` quantizes (``kind``: ``layer`` or ``module``), in layer order."""
    rules = resolve_rules(linear_names(model), spec)
    quantized = [n for n, r in rules.items() if r is not None]
    per_layer: dict[int, list[str]] = {}
    for name in quantized:
        m = _LAYER_NAME.search(name)
        if m:
            per_layer.setdefault(int(m[1]), []).append(name)
    if kind == "layer":
        return [Unit(f"l{i}", i, tuple(names)) for i, names in sorted(per_layer.items())]
    if kind == "module":
        return [Unit(f"l{i}.{_LAYER_NAME.search(n)[2]}", i, (n,)) for i, names in sorted(per_layer.items())
                for n in names]
    raise EvalsuiteError(f"--unit must be layer or module, got {kind!r}")


def quantize_units(model: Any, spec: WeightSpec, units: Iterable[Unit]) -> dict[str, dict[str, torch.nn.Module]]:
    """Per unit pattern: {module name: a quantized, frozen copy of that baseline module}."""
    from optimum.quanto import freeze

    rules = resolve_rules(linear_names(model), spec)
    out: dict[str, dict[str, torch.nn.Module]] = {}
    with torch.no_grad():  # qint4/qint2 fail under inference_mode
        for unit in units:
            holder = torch.nn.Module()
            keys = {name: f"m{j}" for j, name in enumerate(unit.modules)}
            for name, key in keys.items():
                holder.add_module(key, copy.deepcopy(model.get_submodule(name)))
            quantize_named(holder, {key: rules[name] for name, key in keys.items()})
            freeze(holder)
            out[unit.pattern] = {name: holder.get_submodule(key).eval() for name, key in keys.items()}
    return out


@contextmanager
def swapped(model: Any, modules: dict[str, torch.nn.Module]) -> Iterator[Any]:
    """``model`` with the named submodules replaced by ``modules``; the originals are put back on exit."""
    saved: list[tuple[torch.nn.Module, str, torch.nn.Module]] = []
    try:
        for name, new in modules.items():
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name)
            saved.append((parent, child, getattr(parent, child)))
            setattr(parent, child, new)
        yield model
    finally:
        for parent, child, old in reversed(saved):
            setattr(parent, child, old)


def merged(qunits: dict[str, dict[str, torch.nn.Module]], skip: Iterable[str] = ()) -> dict[str, torch.nn.Module]:
    """All quantized modules of every unit not in ``skip`` (the mixed variant that keeps ``skip``)."""
    skip = set(skip)
    return {name: mod for pattern, mods in qunits.items() if pattern not in skip for name, mod in mods.items()}


def linear_params(model: Any, names: Iterable[str]) -> int:
    """Parameters of the named Linear weights."""
    return sum(model.get_submodule(n).weight.numel() for n in names)
