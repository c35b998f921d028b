"""Mixed-precision weights: which precision each Linear module gets under a spec with ``[...]`` options.

Patterns (``w4g64[keep=l0,l29.mlp;w8=*.down_proj]``) name modules by their dotted HF names; ``lN`` / ``lA-B`` is
short for ``layers.N`` / layers A..B. A pattern matches a module when it matches the whole name, a dotted suffix
of it, or a module above it (``l3`` keeps every Linear of decoder layer 3). The first option that matches a
module decides its precision; the rest get the base format. Pure arithmetic, no torch (the planner uses it).
"""
from __future__ import annotations

import fnmatch
import re
from typing import Iterable

from evalsuite.errors import EvalsuiteError
from evalsuite.variants.forms import WeightSpec
from evalsuite.variants.quant_grammar import override_spec

_LAYER = re.compile(r"^l(\d+)(?:-(\d+))?$")
TOP_RE = re.compile(r"^top(\d+)$")


def expand_pattern(pattern: str) -> list[str]:
    """``l0-2.mlp`` -> [layers.0.mlp, layers.1.mlp, layers.2.mlp]; other patterns unchanged."""
    head, dot, rest = pattern.partition(".")
    m = _LAYER.match(head)
    if not m:
        return [pattern]
    lo, hi = int(m[1]), int(m[2] if m[2] is not None else m[1])
    if hi < lo:
        raise EvalsuiteError(f"bad layer range {head!r} in pattern {pattern!r}: {hi} < {lo}")
    return [f"layers.{i}{dot}{rest}" for i in range(lo, hi + 1)]


def matches(name: str, pattern: str) -> bool:
    """Whether module ``name`` is matched by one expanded pattern (whole name, dotted suffix, or a parent)."""
    return any(fnmatch.fnmatchcase(name, p) for p in (pattern, "*." + pattern, pattern + ".*",
                                                        "*." + pattern + ".*"))


def check_patterns(patterns: Iterable[str]) -> None:
    """Symbolic ``topN`` patterns must be resolved first (``evalsuite ablate --sensitivity``)."""
    for p in patterns:
        if TOP_RE.match(p):
            raise EvalsuiteError(f"pattern {p!r} needs a sensitivity ranking: run `evalsuite sensitivity` and pass "
                                 "its results.json (evalsuite ablate --sensitivity FILE)")


def resolve_rules(names: list[str], spec: WeightSpec) -> dict[str, WeightSpec | None]:
    """Precision of each Linear module name: a WeightSpec, or None when kept unquantized.

    Modules excluded by the spec (``lm_head``) are left out. A pattern that matches no module is an error."""
    rules: dict[str, WeightSpec | None] = {}
    used: set[str] = set()
    options = [(key, p, expand_pattern(p)) for key, pats in spec.overrides for p in pats]
    check_patterns(p for _, p, _ in options)
    for name in names:
        if any(fnmatch.fnmatchcase(name, pat) or name == pat for pat in spec.exclude):
            continue
        rule: WeightSpec | None = WeightSpec(fmt=spec.fmt, bits=spec.bits, group=spec.group)
        for key, pattern, expanded in options:
            if any(matches(name, e) for e in expanded):
                used.add(pattern)
                rule = override_spec(key)
                break
        rules[name] = rule
    unused = [p for _, p, _ in options if p not in used]
    if unused:
        raise EvalsuiteError(f"{spec.name}: pattern {unused[0]!r} matches no quantizable Linear module "
                             f"(e.g. {names[0] if names else 'none'}; use lN, lA-B, layers.N.mlp, *.down_proj)")
    return rules


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


def rule_bytes(rule: WeightSpec | None, out_f: int, in_f: int, dtype_bytes: int) -> tuple[float, int]:
    """(payload bytes, metadata bytes) of one out_f x in_f weight under ``rule`` (None: unquantized)."""
    n = out_f * in_f
    if rule is None or rule.fmt == "none":
        return float(n * dtype_bytes), 0
    if rule.fmt == "int" and rule.bits < 8:
        group = effective_group(in_f, rule.group or in_f)
        return n * rule.bits / 8, (n // group) * 2 * dtype_bytes
    return n * rule.bytes_per_param, out_f * dtype_bytes
