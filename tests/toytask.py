"""A small deterministic task used by runner/store tests (and as the entry-point plugin in a test package)."""
from __future__ import annotations

import random

from evalsuite.tasks.base import GenSettings, Sample, Score, Task


class CopyTask(Task):
    """Ask the model to repeat a word; score 1 when the word comes back."""

    name = "copy"
    version = "1"
    description = "repeat a word (test task)"
    default_params = {"n": 6, "max_new_tokens": 6, "stop_at_newline": True}

    def samples(self, params, seed):
        rng = random.Random(f"copy:{seed}")
        words = ["apple", "river", "stone", "cloud", "maple", "tiger", "piano", "ocean", "lemon", "amber"]
        out = []
        for i in range(params["n"]):
            w = rng.choice(words)
            filler = " ".join(rng.choice(words) for _ in range(rng.randint(1, 30)))
            out.append(Sample(id=f"copy-{i}", target=w, metadata={"length": "long" if len(filler) > 80 else "short"},
                              messages=({"role": "user", "content": f"{filler}. Repeat the word: {w}"},)))
        return out

    def gen_settings(self, params):
        return GenSettings(max_new_tokens=params["max_new_tokens"], stop=("\n",) if params["stop_at_newline"] else ())

    def score(self, sample, output):
        ok = sample.target in output.lower()
        return Score(value=float(ok), extracted=output[:20], reason="found" if ok else "missing")
