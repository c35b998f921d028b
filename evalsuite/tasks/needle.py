"""RULER-style needle-in-a-haystack retrieval over a procedurally generated haystack.

Kinds: ``single`` (one needle), ``multi_key`` (the needle plus distractor needles with other keys),
``multi_value`` (one key with several values, all must come back), ``multi_query`` (several keys asked, all
must come back) and ``variable_tracking`` (a chain ``VAR A = 12345``, ``VAR B = VAR A`` ...; name every
variable holding the value). Samples form a grid kind x context_len x depth; ``context_len`` is the prompt
length in tokens *of the model under test*: when the runner knows the model (``Task.context``), each prompt is
measured with its own tokenizer and chat template and its haystack resized until the count is within 1% (at
least 8 tokens) of ``context_len``; the measured count is kept as the sample's ``prompt_tokens`` metric, and a
prompt that cannot fit the model's window with its answer is a one-line error. Without a model (a served model)
the length is a tokenizer-free estimate calibrated on SmolLM2 (~10%). The stream (``NeedleTask.stream``) cycles
the grid in balanced order, one pass per repeat index; the default set is its first ``repeats`` passes.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from itertools import count
from typing import Any, Iterator

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks import needle_text as nt
from evalsuite.tasks.base import GenSettings, Sample, Score, Task
from evalsuite.tasks.stream import balanced_grid

KINDS = ("single", "multi_key", "multi_value", "multi_query", "variable_tracking")
VALUE_TYPES = ("number", "word", "uuid")
MULTI_ANSWER = ("multi_value", "multi_query", "variable_tracking")
SYSTEM = "You are a careful reader. Answer with the requested value only, no explanation."
#: the longest context_len accepted when the model's window is unknown (a served model): larger is a typo
MAX_CONTEXT = 1 << 21
_NOUN = {"number": "number", "word": "word", "uuid": "UUID"}


@dataclass
class Built:
    """The parts of one needle prompt before the haystack is assembled."""

    intro: str
    question: str
    needles: list[tuple[float, str]]  # (depth, sentence)
    values: list[str]
    distractors: list[str] = field(default_factory=list)


def _needle(key: str, value: str, vtype: str) -> str:
    return f"One of the special magic {_NOUN[vtype]}s for {key} is: {value}."


def _intro(vtype: str) -> str:
    return (f"Some special magic {_NOUN[vtype]}s are hidden within the following text. Make sure to memorize "
            "them. I will quiz you about them afterwards.")


def _build_keyed(kind: str, rng: random.Random, vtype: str, depth: float, p: dict[str, Any]) -> Built:
    """single / multi_key / multi_value / multi_query needles and their question."""
    noun = _NOUN[vtype]
    n_keys = {"multi_key": 1 + p["num_distractors"], "multi_query": p["num_queries"]}.get(kind, 1)
    n_values = p["num_values"] if kind == "multi_value" else n_keys
    keys = nt.distinct(rng, nt.make_key, n_keys)
    values = nt.distinct(rng, lambda r: nt.make_value(r, vtype), n_values)
    if kind == "multi_value":
        pairs = [(keys[0], v) for v in values]
    else:
        pairs = list(zip(keys, values))
    depths = [depth] + [rng.random() for _ in pairs[1:]]
    needles = [(d, _needle(k, v, vtype)) for d, (k, v) in zip(depths, pairs)]
    if kind == "multi_value":
        question = (f"What are all the special magic {noun}s for {keys[0]} mentioned in the text above? "
                    f"Answer with the {len(values)} {noun}s only.")
        return Built(_intro(vtype), question, needles, values)
    if kind == "multi_query":
        asked = ", ".join(keys[:-1]) + f" and {keys[-1]}"
        question = (f"What are the special magic {noun}s for {asked} mentioned in the text above? "
                    f"Answer with the {len(values)} {noun}s only.")
        return Built(_intro(vtype), question, needles, values)
    question = (f"What is the special magic {noun} for {keys[0]} mentioned in the text above? "
                f"Answer with the {noun} only.")
    return Built(_intro(vtype), question, needles, values[:1], distractors=values[1:])


def _build_tracking(rng: random.Random, depth: float, p: dict[str, Any]) -> Built:
    """A chain of ``vt_hops`` assignments (queried) plus ``vt_chains - 1`` distractor chains."""
    hops, chains = p["vt_hops"], p["vt_chains"]
    names = nt.distinct(rng, nt.make_var, hops * chains)
    values = nt.distinct(rng, lambda r: nt.make_value(r, "number"), chains)
    needles: list[tuple[float, str]] = []
    for c in range(chains):
        chain = names[c * hops:(c + 1) * hops]
        start = depth if c == 0 else rng.random()
        spots = [start] + sorted(rng.uniform(start, 1.0) for _ in chain[1:])
        texts = [f"VAR {chain[0]} = {values[c]}."] + [f"VAR {b} = VAR {a}." for a, b in zip(chain, chain[1:])]
        needles.extend(zip(spots, texts))
    intro = "Memorize and track the chain of variable assignments hidden in the following text."
    question = (f"Question: Find all variables that are assigned the value {values[0]} in the text above. "
                f"Answer with the {hops} variable names only.")
    return Built(intro, question, needles, names[:hops], distractors=names[hops:])


def build_sample(kind: str, vtype: str, context_len: int, depth: float, rng: random.Random,
                 p: dict[str, Any], adjust: float = 0.0) -> tuple[str, Built]:
    """The user message (intro, haystack with needles, question) sized to about ``context_len`` tokens
    (``adjust`` tokens more haystack than the estimate asks for: the measured correction)."""
    built = _build_tracking(rng, depth, p) if kind == "variable_tracking" else _build_keyed(
        kind, rng, vtype, depth, p)
    fixed = " ".join([SYSTEM, built.intro, built.question] + [t for _, t in built.needles])
    budget = context_len - nt.TEMPLATE_TOKENS - nt.estimate_tokens(fixed) - len(built.needles) - 4 + adjust
    if budget < 32:
        raise EvalsuiteError(f"task 'needle': context_len {context_len} is too small for kind {kind!r} "
                             f"(needs at least {context_len - int(budget) + 32})")
    haystack = nt.insert_at(nt.filler(rng, budget), built.needles)
    return f"{built.intro}\n\n{haystack}\n\n{built.question}", built


def _grid_order(p: dict[str, Any]) -> list[tuple[int, ...]]:
    """One pass over the grid: (kind, context_len, depth) index triples in balanced order."""
    return balanced_grid((len(p["kinds"]), len(p["context_lens"]), len(p["depths"])))


_NUMBER_COMMA = re.compile(r"(?<=\d),(?=\d{3})")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def normalize(text: str) -> str:
    """Lower-case, drop thousands separators, punctuation -> space; padded so that matches are whole words."""
    text = _NUMBER_COMMA.sub("", text.lower())
    return f" {_NON_ALNUM.sub(' ', text).strip()} "


def _appears(value: str, normalized_output: str) -> bool:
    return normalize(value) in normalized_output


def _check(p: dict[str, Any]) -> None:
    """Reject bad parameter values with one-line errors."""
    def bad(msg: str) -> EvalsuiteError:
        return EvalsuiteError(f"task 'needle': {msg}")

    for key, known in (("kinds", KINDS), ("value_types", VALUE_TYPES)):
        if not p[key] or not isinstance(p[key], list) or any(v not in known for v in p[key]):
            raise bad(f"{key} must be a non-empty list of {', '.join(known)}; got {p[key]!r}")
    if not p["context_lens"] or any(not isinstance(c, int) or c < 128 for c in p["context_lens"]):
        raise bad(f"context_lens must be integers >= 128; got {p['context_lens']!r}")
    if not p["depths"] or any(not isinstance(d, (int, float)) or not 0 <= d <= 1 for d in p["depths"]):
        raise bad(f"depths must be numbers in [0, 1]; got {p['depths']!r}")
    if len(set(p["kinds"])) < len(p["kinds"]) or len(set(p["context_lens"])) < len(p["context_lens"]) or len(
            {f"{d:.2f}" for d in p["depths"]}) < len(p["depths"]):
        raise bad("kinds, context_lens and depths must not repeat (depths are told apart at 2 decimals)")
    for key, top in (("repeats", 1000), ("num_distractors", 20), ("num_values", 10), ("num_queries", 10),
                     ("vt_hops", 10), ("vt_chains", 10), ("max_new_tokens", 4096)):
        if not isinstance(p[key], int) or not 1 <= p[key] <= top:
            raise bad(f"{key} must be an integer in 1..{top}; got {p[key]!r}")


class NeedleTask(Task):
    """Needle-in-a-haystack retrieval (RULER-spirited); binary score per sample."""

    name = "needle"
    version = "2"  # 2: prompts sized with the model's own tokenizer
    description = "synthetic long-context retrieval: needles, multi-key/value/query, variable tracking"
    binary = True
    default_params: dict[str, Any] = {
        "kinds": ["single", "multi_key", "multi_value", "variable_tracking"],
        "context_lens": [512, 1024, 2048],
        "depths": [0.1, 0.5, 0.9],
        "value_types": ["number", "word", "uuid"],
        "repeats": 1,
        "num_distractors": 3,
        "num_values": 2,
        "num_queries": 2,
        "vt_hops": 2,
        "vt_chains": 1,
        "max_new_tokens": 64,
    }

    def stream(self, params: dict[str, Any], seed: int, start: int = 0) -> Iterator[Sample]:
        """Endless: the grid kind x context_len x depth in ``balanced_grid`` order (any prefix covers every kind,
        length and depth evenly), pass after pass with the repeat index rep = 0, 1, 2, ... in the ids."""
        p = self.params(params)
        _check(p)
        self._check_lengths(p)
        order = _grid_order(p)
        for k in count(start):
            rep, pos = divmod(k, len(order))
            yield self._cell(p, order[pos], rep, seed)

    def samples(self, params: dict[str, Any], seed: int) -> list[Sample]:
        """The default set: the stream's first ``repeats`` passes, in grid order (kind, context_len, depth, rep)."""
        p = self.params(params)
        _check(p)
        order = _grid_order(p)
        keys = [(*order[k % len(order)], k // len(order)) for k in range(len(order) * p["repeats"])]
        items = zip(keys, self.stream(p, seed))
        return [s for _, s in sorted(items, key=lambda item: item[0])]

    def _cell(self, p: dict[str, Any], cell: tuple[int, ...], rep: int, seed: int) -> Sample:
        """The sample of grid cell (kind, context_len, depth indices) at repeat ``rep``."""
        ki, ci, di = cell
        kind = p["kinds"][ki]
        types = ["number"] if kind == "variable_tracking" else list(p["value_types"])
        if kind in MULTI_ANSWER:
            types = [t for t in types if t != "uuid"] or ["number"]  # keep answers short
        vtype = types[(ci + di + rep) % len(types)]  # a Latin square over ctx x depth
        return self._sample(kind, vtype, p["context_lens"][ci], float(p["depths"][di]), rep, seed, p)

    def _sample(self, kind: str, vtype: str, ctx: int, depth: float, rep: int, seed: int,
                p: dict[str, Any]) -> Sample:
        """One prompt, resized with the model's token counter (when known) until it holds ``ctx`` tokens."""
        sid = f"{kind}-{vtype}/ctx{ctx}/d{depth:.2f}/{rep}"
        count, adjust, measured = self.context.count_tokens, 0.0, None
        for _ in range(6):
            user, built = build_sample(kind, vtype, ctx, depth, random.Random(f"needle/{seed}/{sid}"), p, adjust)
            meta = {"kind": kind, "context_len": ctx, "depth": depth, "value_type": vtype,
                    "n_values": len(built.values)}
            target = {"values": built.values, "distractors": built.distractors}
            messages = ({"role": "system", "content": SYSTEM}, {"role": "user", "content": user})
            if count is None:
                break
            measured = count(Sample(id=sid, messages=messages, target=target))
            if abs(measured - ctx) <= max(8, ctx // 100):
                break
            adjust += (ctx - measured) * 0.98
        if measured is not None:
            target["prompt_tokens"] = measured
            self._check_window(ctx, measured, p)
        return Sample(id=sid, messages=messages, target=target, metadata=meta)

    def _check_lengths(self, p: dict[str, Any]) -> None:
        """Refuse a context_len beyond the model's window (or beyond MAX_CONTEXT when the window is unknown)
        before any haystack is built: building one of 10^8 tokens would take minutes before the same refusal."""
        window = self.context.max_positions() if self.context.max_positions else None
        top = max(p["context_lens"])
        if window and top + p["max_new_tokens"] > window:
            raise EvalsuiteError(f"task 'needle': context_len {top} + {p['max_new_tokens']} answer tokens is "
                                 f"more than {self.context.model_name}'s {window}-token window")
        if top > MAX_CONTEXT:
            raise EvalsuiteError(f"task 'needle': context_len {top} is more than {MAX_CONTEXT} tokens")

    def _check_window(self, ctx: int, measured: int, p: dict[str, Any]) -> None:
        window = self.context.max_positions() if self.context.max_positions else None
        if window and measured + p["max_new_tokens"] > window:
            raise EvalsuiteError(f"task 'needle': context_len {ctx} needs {measured} prompt tokens + "
                                 f"{p['max_new_tokens']} answer tokens, more than {self.context.model_name}'s "
                                 f"{window}-token window")

    def gen_settings(self, params: dict[str, Any]) -> GenSettings:
        return GenSettings(max_new_tokens=int(self.params(params)["max_new_tokens"]))

    def score(self, sample: Sample, output: str) -> Score:
        """1 if every value appears in the output and no distractor does; fraction found in metrics."""
        values, distractors = sample.target["values"], sample.target.get("distractors", [])
        norm = normalize(output)
        found = [v for v in values if _appears(v, norm)]
        wrong = [d for d in distractors if _appears(d, norm)]
        fraction = len(found) / len(values)
        ok = len(found) == len(values) and not wrong
        missing = [v for v in values if v not in found]
        problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"returned distractor(s) {', '.join(wrong)}"] if wrong else [])
        reason = "; ".join(problems) or f"found all {len(values)} value(s)"
        metrics: dict[str, Any] = {"fraction": fraction, "distractors": len(wrong)}
        if "prompt_tokens" in sample.target:
            metrics["prompt_tokens"] = sample.target["prompt_tokens"]
        return Score(value=1.0 if ok else 0.0, extracted=", ".join(found) or None, reason=reason, metrics=metrics)
