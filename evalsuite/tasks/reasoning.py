"""Multi-step arithmetic word problems: generated (steps x difficulty grid) or read from a GSM8K-format jsonl.

Three worked examples (earlier chat turns) show the format: calculations, then ``Answer: N``. Extraction prefers
that line, then a GSM8K ``#### N`` marker, then the last number in the output; answers compare numerically. The
defaults (1-2 steps, small numbers) suit a ~100M-parameter instruct model, which rarely gets 3-step problems right.
"""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from itertools import count
from typing import Any, Iterator

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks.base import GenSettings, Sample, Score, Task
from evalsuite.tasks.stream import balanced_grid

#: Worked examples shown as earlier chat turns: they fix the answer format (one calculation per line, then
#: ``Answer: N``), which a small instruct model follows far better than a written instruction.
SHOTS: tuple[tuple[str, str], ...] = (
    ("Mia has 3 pens. Mia gets 4 more pens. How many pens does Mia have now?", "3 + 4 = 7\nAnswer: 7"),
    ("Sam has 9 cards. Sam gives away 3 cards. How many cards does Sam have now?", "9 - 3 = 6\nAnswer: 6"),
    ("Lee has 5 shells. Lee finds 6 more shells. Lee loses 4 shells. How many shells does Lee have now?",
     "5 + 6 = 11\n11 - 4 = 7\nAnswer: 7"),
)


@dataclass(frozen=True)
class Level:
    """Number sizes and operations of one difficulty."""

    start: tuple[int, int]
    operand: tuple[int, int]
    ops: tuple[str, ...]


LEVELS: dict[str, Level] = {
    "easy": Level(start=(2, 9), operand=(1, 5), ops=("add",)),
    "medium": Level(start=(5, 30), operand=(2, 12), ops=("add", "sub")),
    "hard": Level(start=(10, 60), operand=(2, 20), ops=("add", "sub", "mul")),
    "expert": Level(start=(40, 400), operand=(10, 150), ops=("add", "sub", "mul", "div")),
}
_NAMES = ("Tom", "Anna", "Maria", "Ben", "Lily", "Omar", "Sara", "Leo", "Nina", "Jack", "Emma", "Ravi")
_ITEMS = ("apples", "marbles", "stickers", "pencils", "cookies", "stamps", "shells", "coins", "books", "cards")
_ADD = ("{n} gets {k} more {i}.", "{n} buys {k} more {i}.", "{n} finds {k} more {i}.")
_SUB = ("{n} gives away {k} {i}.", "{n} loses {k} {i}.", "{n} uses {k} {i}.")


def _step(rng: random.Random, level: Level, name: str, item: str, have: int) -> tuple[str, int]:
    """One operation sentence and the new count (never negative, divisions exact)."""
    ops = [o for o in level.ops if not (o == "sub" and have < 2) and not (o == "div" and have < 4)]
    op = rng.choice(ops)
    lo, hi = level.operand
    if op == "add":
        k = rng.randint(lo, hi)
        return rng.choice(_ADD).format(n=name, k=k, i=item), have + k
    if op == "sub":
        k = rng.randint(min(lo, have - 1), min(hi, have - 1))
        return rng.choice(_SUB).format(n=name, k=k, i=item), have - k
    if op == "mul":
        packs, per = rng.randint(2, 5), rng.randint(2, max(2, hi // 3))
        return f"{name} buys {packs} packs of {item} with {per} {item} in each pack.", have + packs * per
    divisors = [d for d in (2, 3, 4, 5) if have % d == 0] or [1]
    d = rng.choice(divisors)
    if d == 1:  # no exact division possible: fall back to an addition
        return _step(rng, Level(level.start, level.operand, ("add",)), name, item, have)
    return f"{name} splits the {item} into {d} equal groups and keeps one group.", have // d


def make_problem(rng: random.Random, steps: int, level: Level) -> tuple[str, int]:
    """A word problem with ``steps`` operations after the starting amount, and its answer."""
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    have = rng.randint(*level.start)
    sentences = [f"{name} has {have} {item}."]
    for _ in range(steps):
        sentence, have = _step(rng, level, name, item, have)
        sentences.append(sentence)
    sentences.append(f"How many {item} does {name} have now?")
    return " ".join(sentences), have


_NUM = r"-?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_ANSWER_RE = re.compile(r"answer(?:\s+is)?\s*[:=]?(.*)", re.IGNORECASE)
_HASH_RE = re.compile(rf"####\s*({_NUM})")
_ANY_RE = re.compile(rf"(?<![\w.]){_NUM}")


def parse_number(text: str) -> float | None:
    """``"$1,234.0"`` -> 1234.0; None if not a number."""
    cleaned = re.sub(r"[\s$,]", "", text).rstrip(".")
    try:
        return float(cleaned)
    except ValueError:
        return None


def extract_answer(output: str) -> tuple[float | None, str | None, str]:
    """(value, matched text, method): the last number on the last ``Answer: ...`` line (so ``Answer: 3 + 4 = 7``
    gives 7), else ``#### N``, else the last number anywhere."""
    for line in reversed(output.splitlines()):
        found = [_ANY_RE.findall(m.group(1)) for m in _ANSWER_RE.finditer(line)]
        if found and found[-1]:
            return parse_number(found[-1][-1]), found[-1][-1].strip(), "answer"
    found = _HASH_RE.findall(output)
    if found:
        return parse_number(found[-1]), found[-1].strip(), "hashes"
    found = _ANY_RE.findall(output)
    if found:
        return parse_number(found[-1]), found[-1].strip(), "last number"
    return None, None, "no number"


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def load_gsm8k(path: Path) -> list[dict[str, Any]]:
    """Rows ``{question, answer, target, steps}`` from a GSM8K-format jsonl (answer ends ``#### N``)."""
    if not path.is_file():
        raise EvalsuiteError(f"reasoning: jsonl_path not found: {path}")
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            question, answer = row["question"], row["answer"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise EvalsuiteError(f"reasoning: {path}:{lineno}: need a JSON object with question and answer")
        marker = _HASH_RE.search(str(answer))
        target = parse_number(marker.group(1)) if marker else None
        if target is None:
            raise EvalsuiteError(f"reasoning: {path}:{lineno}: answer has no '#### N' line")
        work = str(answer)[:marker.start()]
        steps = work.count("<<") or len([ln for ln in work.splitlines() if ln.strip()])
        rows.append({"question": str(question), "target": target, "steps": steps, "line": lineno})
    if not rows:
        raise EvalsuiteError(f"reasoning: {path} holds no problems")
    return rows


def _messages(question: str) -> tuple[dict[str, str], ...]:
    """The worked examples as earlier turns, then the question (the model's default system prompt applies)."""
    turns: list[dict[str, str]] = []
    for shot_q, shot_a in SHOTS:
        turns += [{"role": "user", "content": shot_q}, {"role": "assistant", "content": shot_a}]
    return (*turns, {"role": "user", "content": question})


def _generated(steps: int, difficulty: str, i: int, seed: int) -> Sample:
    """Problem ``i`` of the cell (steps, difficulty): depends on nothing else, so grids may change around it."""
    sid = f"s{steps}/{difficulty}/{i}"
    question, answer = make_problem(random.Random(f"reasoning/{seed}/{sid}"), steps, LEVELS[difficulty])
    return Sample(id=sid, messages=_messages(question), target={"answer": answer},
                  metadata={"steps": steps, "difficulty": difficulty})


def _grid_order(p: dict[str, Any]) -> list[tuple[int, ...]]:
    """One pass over the cells: (steps, difficulty) index pairs in balanced order."""
    return balanced_grid((len(p["steps"]), len(p["difficulties"])))


class ReasoningTask(Task):
    """Arithmetic word problems, exact numeric answer; binary score per sample."""

    name = "reasoning"
    version = "1"
    description = "multi-step arithmetic word problems (generated or GSM8K-format jsonl)"
    binary = True
    default_params: dict[str, Any] = {
        "steps": [1, 2],
        "difficulties": ["easy", "medium"],
        "per_cell": 8,
        "jsonl_path": None,
        "limit": None,
        "max_new_tokens": 64,
    }

    def samples(self, params: dict[str, Any], seed: int) -> list[Sample]:
        """The default set: generated, the stream's first ``per_cell`` passes in grid order (steps, difficulty,
        index); from a jsonl, its rows (``limit`` of them, seeded) in file order."""
        p = self.params(params)
        if p["jsonl_path"]:
            return self._file_samples(p, seed)
        _check(p)
        order = _grid_order(p)
        keys = [(*order[k % len(order)], k // len(order)) for k in range(len(order) * p["per_cell"])]
        items = zip(keys, self.stream(p, seed))
        return [s for _, s in sorted(items, key=lambda item: item[0])]

    def stream(self, params: dict[str, Any], seed: int, start: int = 0) -> Iterator[Sample]:
        """Generated: endless, the steps x difficulty cells in ``balanced_grid`` order, pass after pass with the
        index i = 0, 1, 2, ... in the ids. From a jsonl: finite, the default set in a seeded shuffled order."""
        p = self.params(params)
        if p["jsonl_path"]:
            rows = self._file_samples(p, seed)
            random.Random(f"reasoning/{seed}/jsonl-stream").shuffle(rows)
            yield from rows[start:]
            return
        _check(p)
        order = _grid_order(p)
        for k in count(start):
            i, pos = divmod(k, len(order))
            si, di = order[pos]
            yield _generated(p["steps"][si], p["difficulties"][di], i, seed)

    def stream_size(self, params: dict[str, Any], seed: int = 0) -> int | None:
        """None when generated (endless); the number of rows used from a jsonl."""
        p = self.params(params)
        return len(self._file_samples(p, seed)) if p["jsonl_path"] else None

    def _file_samples(self, p: dict[str, Any], seed: int) -> list[Sample]:
        path, limit = Path(p["jsonl_path"]).expanduser(), p["limit"]
        rows = load_gsm8k(path)
        if limit is not None:
            if not isinstance(limit, int) or limit < 1:
                raise EvalsuiteError(f"reasoning: limit must be a positive integer; got {limit!r}")
            if limit < len(rows):
                picked = random.Random(f"reasoning/{seed}/jsonl").sample(range(len(rows)), limit)
                rows = [rows[i] for i in sorted(picked)]
        return [Sample(id=f"jsonl/{r['line']}", messages=_messages(r["question"]),
                       target={"answer": r["target"]},
                       metadata={"steps": r["steps"], "difficulty": "file", "source": path.name})
                for r in rows]

    def gen_settings(self, params: dict[str, Any]) -> GenSettings:
        return GenSettings(max_new_tokens=int(self.params(params)["max_new_tokens"]))

    def score(self, sample: Sample, output: str) -> Score:
        """1 if the extracted number equals the target answer."""
        target = float(sample.target["answer"])
        value, text, method = extract_answer(output)
        if value is None:
            return Score(value=0.0, extracted=text, reason=f"no number found (expected {_fmt(target)})")
        ok = abs(value - target) <= 1e-6 * max(1.0, abs(target))
        verdict = "correct" if ok else f"wrong, expected {_fmt(target)}"
        return Score(value=1.0 if ok else 0.0, extracted=_fmt(value), reason=f"{method} {_fmt(value)}: {verdict}",
                     metrics={"method": method})


def _check(p: dict[str, Any]) -> None:
    """Reject bad generator parameters with one-line errors."""
    if not p["steps"] or any(not isinstance(s, int) or not 1 <= s <= 10 for s in p["steps"]):
        raise EvalsuiteError(f"reasoning: steps must be integers in 1..10; got {p['steps']!r}")
    if not p["difficulties"] or any(d not in LEVELS for d in p["difficulties"]):
        raise EvalsuiteError(f"reasoning: difficulties must be among {', '.join(LEVELS)}; got {p['difficulties']!r}")
    if len(set(p["steps"])) < len(p["steps"]) or len(set(p["difficulties"])) < len(p["difficulties"]):
        raise EvalsuiteError(f"reasoning: steps and difficulties must not repeat; got {p['steps']!r}, "
                             f"{p['difficulties']!r}")
    for key in ("per_cell", "max_new_tokens"):
        if not isinstance(p[key], int) or p[key] < 1:
            raise EvalsuiteError(f"reasoning: {key} must be a positive integer; got {p[key]!r}")
