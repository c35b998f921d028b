"""Gate policy: YAML -> typed, validated dataclasses (thresholds per task and per metadata selector slice).

A policy file's ``defaults`` inherit the shipped ``default_policy.yaml`` for keys it does not set; set a
threshold to ``null`` to switch that check off. Resolution order: defaults <- task <- slice.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from evalsuite.errors import EvalsuiteError
from evalsuite.stats.slices import SliceFilter
from evalsuite.stats.sequential import ALPHA

#: threshold key -> (lowest allowed, highest allowed or None); min_samples must be an integer
THRESHOLD_KEYS: dict[str, tuple[float, float | None]] = {
    "max_drop": (0.0, 1.0), "min_recovery": (0.0, None), "max_flip_rate": (0.0, 1.0),
    "max_kld": (0.0, None), "min_score": (0.0, 1.0), "min_samples": (0, None)}
ON_INCONCLUSIVE = ("fail", "pass")
#: ``defaults.false_fail``: the guarantee a FAIL carries (evalsuite.gate.family)
FAMILY_ALPHA, PER_CHECK = "family_alpha", "per_check"
FALSE_FAIL = (FAMILY_ALPHA, PER_CHECK)
MAX_ALPHA = 0.5  #: the largest ``defaults.alpha`` accepted (the shipped one: ALPHA, the sequences' own)
POLICY_WIDE = ("on_inconclusive", "alpha", "false_fail")  #: keys of ``defaults`` only (not per task or slice)
#: checks on a task's secondary metrics (Score.metrics with values in [0, 1]): ``metrics: {NAME: {KIND: t}}``
METRIC_KINDS = ("max_drop", "max_rise")
_OPS = re.compile(r"^\s*(>=|<=|==|!=|<|>)\s*(.*?)\s*$")
Overrides = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Thresholds:
    """Resolved thresholds of one (task, slice); None switches a check off."""

    max_drop: float | None = None
    min_recovery: float | None = None
    max_flip_rate: float | None = None
    max_kld: float | None = None
    min_score: float | None = None
    min_samples: int = 0
    #: ((metric, kind), threshold) pairs: kind max_drop (mean may fall at most t) or max_rise (rise at most t)
    metrics: tuple[tuple[tuple[str, str], float | None], ...] = ()

    def with_overrides(self, overrides: Overrides) -> Thresholds:
        plain = {k: (0 if k == "min_samples" and v is None else v) for k, v in overrides if k != "metrics"}
        merged = dict(self.metrics)
        for k, v in overrides:
            if k == "metrics":
                merged.update(dict(v))
        return replace(self, **plain, metrics=tuple(sorted(merged.items())))


def _num(x: Any) -> float | None:
    """x as a float when it is a number or a numeric string (never a bool)."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def _equal(meta: Any, value: Any) -> bool:
    a, b = _num(meta), _num(value)
    if a is not None and b is not None:
        return a == b
    if isinstance(meta, str) or isinstance(value, str):
        return str(meta) == str(value)
    return bool(meta == value)


@dataclass(frozen=True)
class Condition:
    """``metadata[key] <op> value``; op is one of == != < <= > >= in."""

    key: str
    op: str
    value: Any

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        if self.key not in metadata:
            return False
        meta = metadata[self.key]
        if self.op == "in":
            return any(_equal(meta, v) for v in self.value)
        if self.op in ("==", "!="):
            return _equal(meta, self.value) == (self.op == "==")
        a = _num(meta)
        if a is None:
            return False
        b = float(self.value)
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[self.op]

    def __str__(self) -> str:
        if self.op == "in":
            return f"{self.key}=" + "|".join(str(v) for v in self.value)
        return f"{self.key}{'=' if self.op == '==' else self.op}{self.value}"


@dataclass(frozen=True)
class SliceRule:
    """A selector slice of one task: pools every sample matching all conditions; its own thresholds."""

    conditions: tuple[Condition, ...]
    overrides: Overrides = ()

    @property
    def name(self) -> str:
        return ",".join(str(c) for c in self.conditions)

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        return all(c.matches(metadata) for c in self.conditions)


@dataclass(frozen=True)
class TaskPolicy:
    """Threshold overrides of one task and its selector slices.

    ``optional``: a run without this task is not a gap (no "no samples" check); its thresholds apply when it ran.
    """

    overrides: Overrides = ()
    slices: tuple[SliceRule, ...] = ()
    optional: bool = False


@dataclass(frozen=True)
class Policy:
    """A parsed gate policy."""

    defaults: Thresholds
    tasks: Mapping[str, TaskPolicy] = field(default_factory=dict)
    on_inconclusive: str = "fail"
    source: str = "<inline>"
    #: each sequence's error level: a false PASS per check, a false FAIL per variant (or per check: false_fail)
    alpha: float = ALPHA
    false_fail: str = FAMILY_ALPHA  # family_alpha | per_check

    def thresholds(self, task: str, rule: SliceRule | None = None) -> Thresholds:
        """Thresholds of ``task`` (slice "all"), or of one of its selector slices."""
        tp = self.tasks.get(task, TaskPolicy())
        resolved = self.defaults.with_overrides(tp.overrides)
        return resolved.with_overrides(rule.overrides) if rule else resolved

    def slices(self, task: str) -> tuple[SliceRule, ...]:
        return self.tasks.get(task, TaskPolicy()).slices

    def filters(self) -> list[SliceFilter]:
        """One compare() filter per selector slice, so the stats table holds each pooled slice."""
        return [SliceFilter(rule.name, rule.matches, task) for task, tp in self.tasks.items() for rule in tp.slices]

    def to_dict(self) -> dict[str, Any]:
        def task(tp: TaskPolicy) -> dict[str, Any]:
            slices = [{"where": r.name, **_jsonable(r.overrides)} for r in tp.slices]
            return {**_jsonable(tp.overrides), "optional": tp.optional, "slices": slices}
        return {"source": self.source, "on_inconclusive": self.on_inconclusive, "alpha": self.alpha,
                "false_fail": self.false_fail, "defaults": {
            **asdict(self.defaults), "metrics": _jsonable((("metrics", self.defaults.metrics),)).get("metrics", {})},
                "tasks": {t: task(tp) for t, tp in self.tasks.items()}}


def _jsonable(overrides: Overrides) -> dict[str, Any]:
    """Overrides as plain JSON (metric checks as ``{NAME: {kind: t}}``)."""
    out: dict[str, Any] = {}
    for k, v in overrides:
        if k == "metrics":
            for (name, kind), t in v:
                out.setdefault("metrics", {}).setdefault(name, {})[kind] = t
        else:
            out[k] = v
    return out


class PolicyParser:
    """Validates one policy document; every error names the offending key path and the file."""

    def __init__(self, source: str, kind: str = "policy") -> None:
        self.source, self.kind = source, kind

    def fail(self, where: str, msg: str) -> EvalsuiteError:
        return EvalsuiteError(f"{self.kind} {self.source}: {where}: {msg}")

    def check_keys(self, where: str, data: Any, allowed: list[str] | None) -> Mapping[str, Any]:
        if data is None:
            return {}
        if not isinstance(data, Mapping):
            raise self.fail(where, f"expected a mapping, got {type(data).__name__}")
        for key in data:
            if allowed is not None and key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(allowed)}"
                raise self.fail(where, f"unknown key {key!r} ({hint})")
        return data

    def threshold(self, where: str, key: str, value: Any) -> float | int | None:
        if value is None:
            return None
        lo, hi = THRESHOLD_KEYS[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                key == "min_samples" and not isinstance(value, int)):
            kind = "an integer" if key == "min_samples" else "a number"
            raise self.fail(f"{where}.{key}", f"must be {kind} or null, got {value!r}")
        if value < lo or (hi is not None and value > hi):
            raise self.fail(f"{where}.{key}", f"{value!r} is outside [{lo:g}, {'inf' if hi is None else f'{hi:g}'}]")
        return value

    def overrides(self, where: str, data: Mapping[str, Any]) -> Overrides:
        out = tuple((k, self.threshold(where, k, v)) for k, v in data.items() if k in THRESHOLD_KEYS)
        return out + ((("metrics", self.metrics(f"{where}.metrics", data["metrics"])),) if "metrics" in data else ())

    def metrics(self, where: str, data: Any) -> tuple[tuple[tuple[str, str], float | None], ...]:
        """``{NAME: {max_drop|max_rise: t}}`` -> (((NAME, kind), t), ...); t in [0, 1] or null (off)."""
        data = self.check_keys(where, data, None)
        out = []
        for name, checks in data.items():
            checks = self.check_keys(f"{where}.{name}", checks, list(METRIC_KINDS))
            for kind, value in checks.items():
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                          or not 0 <= value <= 1):
                    raise self.fail(f"{where}.{name}.{kind}", f"must be a number in [0, 1] or null, got {value!r}")
                out.append(((str(name), kind), None if value is None else float(value)))
        return tuple(out)

    def condition(self, where: str, key: Any, value: Any) -> Condition:
        if not isinstance(key, str):
            raise self.fail(where, f"metadata key {key!r} must be a string")
        if isinstance(value, list):
            if not value or not all(isinstance(v, (str, int, float, bool)) for v in value):
                raise self.fail(f"{where}.{key}", "a list must hold one or more plain values")
            return Condition(key, "in", tuple(value))
        if isinstance(value, str) and (m := _OPS.match(value)):
            op, rhs = m.group(1), m.group(2)
            if op not in ("==", "!=") and _num(rhs) is None:
                raise self.fail(f"{where}.{key}", f"{value!r} compares with a non-number")
            number = _num(rhs)
            return Condition(key, op, int(number) if number is not None and number.is_integer() else
                             (number if number is not None else rhs))
        if not isinstance(value, (str, int, float, bool)):
            raise self.fail(f"{where}.{key}", f"expected a value, an operator string or a list, got {value!r}")
        return Condition(key, "==", value)

    def slice_rule(self, where: str, data: Any) -> SliceRule:
        data = self.check_keys(where, data, ["where", "metrics", *THRESHOLD_KEYS])
        sel = data.get("where")
        if not isinstance(sel, Mapping) or not sel:
            raise self.fail(f"{where}.where", "required: a non-empty mapping of metadata key -> condition")
        conds = tuple(self.condition(f"{where}.where", k, sel[k]) for k in sorted(sel, key=str))
        return SliceRule(conds, self.overrides(where, data))

    def task(self, name: str, data: Any) -> TaskPolicy:
        where = f"tasks.{name}"
        for key in POLICY_WIDE:
            if isinstance(data, Mapping) and key in data:
                raise self.fail(where, f"{key} is policy-wide: set it under defaults")
        data = self.check_keys(where, data, [*THRESHOLD_KEYS, "metrics", "slices", "optional"])
        if not isinstance(data.get("optional", False), bool):
            raise self.fail(f"{where}.optional", f"must be true or false, got {data['optional']!r}")
        raw = data.get("slices") or []
        if not isinstance(raw, list):
            raise self.fail(f"{where}.slices", "expected a list of entries with 'where' and thresholds")
        rules = tuple(self.slice_rule(f"{where}.slices[{i}]", s) for i, s in enumerate(raw))
        names = [r.name for r in rules]
        if dup := sorted({n for n in names if names.count(n) > 1}):
            raise self.fail(f"{where}.slices", f"selector {dup[0]!r} appears twice")
        return TaskPolicy(self.overrides(where, data), rules, data.get("optional", False))

    def policy(self, data: Any, base: Thresholds) -> Policy:
        data = self.check_keys("top level", data, ["defaults", "tasks", "description"])
        defaults = self.check_keys("defaults", data.get("defaults"), [*THRESHOLD_KEYS, "metrics", *POLICY_WIDE])
        on_inc = self.choice("defaults.on_inconclusive", defaults.get("on_inconclusive", "fail"), ON_INCONCLUSIVE)
        false_fail = self.choice("defaults.false_fail", defaults.get("false_fail", FAMILY_ALPHA), FALSE_FAIL)
        alpha = defaults.get("alpha", ALPHA)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha <= MAX_ALPHA:
            raise self.fail("defaults.alpha", f"must be a number in (0, {MAX_ALPHA:g}], got {alpha!r}")
        tasks = self.check_keys("tasks", data.get("tasks"), None)
        return Policy(base.with_overrides(self.overrides("defaults", defaults)),
                      {str(t): self.task(str(t), v) for t, v in tasks.items()}, on_inc, self.source,
                      float(alpha), false_fail)

    def choice(self, where: str, value: Any, allowed: tuple[str, ...]) -> str:
        """``value`` when it is one of ``allowed``; else an error naming them (and the nearest, if any)."""
        if value in allowed:
            return str(value)
        close = difflib.get_close_matches(str(value), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise self.fail(where, f"must be {' or '.join(repr(a) for a in allowed)}, got {value!r}{hint}")


def parse_policy(data: Any, source: str = "<inline>", inherit: bool = True) -> Policy:
    """A policy from already-loaded YAML data; ``inherit`` fills unset defaults from the shipped policy."""
    base = load_policy(None).defaults if inherit else Thresholds()
    return PolicyParser(source).policy(data, base)


def _read_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise EvalsuiteError(f"policy {source}: not valid YAML ({' '.join(str(exc).split())})") from None


def load_policy(path: str | Path | None = None) -> Policy:
    """Parse a policy file; None loads the shipped ``evalsuite/gate/default_policy.yaml``."""
    if path is None:
        text = (files("evalsuite.gate") / "default_policy.yaml").read_text(encoding="utf-8")
        return PolicyParser("default_policy.yaml").policy(_read_yaml(text, "default_policy.yaml"), Thresholds())
    p = Path(path)
    if not p.is_file():
        raise EvalsuiteError(f"policy file not found: {p}")
    return parse_policy(_read_yaml(p.read_text(encoding="utf-8"), str(p)), str(p))
