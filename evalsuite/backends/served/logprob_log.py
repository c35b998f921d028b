"""The per-token log-probs a server returned with each generation, kept next to the run's store.

One JSONL file per variant under ``<run>/endpoint_logprobs/`` (a resumed run can still compare what was generated
before the crash); both served-model backends generate through ``generate_logged``, which writes them as each
group of answers arrives and scores the answers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from evalsuite.run.prepare import PreparedTask
from evalsuite.store.records import SampleResult
from evalsuite.run.scoring import row_seed, score_sample
from evalsuite.backends.served.endpoint import EndpointPool
from evalsuite.tasks.base import Sample

Tokens = dict[tuple[str, str], list]


@dataclass(frozen=True)
class LogprobLog:
    """``<workdir>/endpoint_logprobs/<variant>.jsonl``: one line per generated sample."""

    workdir: Path

    def path(self, name: str, suffix: str = ".jsonl") -> Path:
        folder = Path(self.workdir) / "endpoint_logprobs"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{name}{suffix}"

    def read(self, name: str) -> Tokens:
        """(task, sample id) -> [(token, logprob, top-k pairs)] of everything stored for ``name``."""
        path = self.path(name)
        out: Tokens = {}
        for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
            if line.strip():
                d = json.loads(line)
                out[(d["task"], d["id"])] = [(t, lp, tuple(map(tuple, top))) for t, lp, top in d["tokens"]]
        return out

    def note(self, name: str, record: dict) -> None:
        """Append ``record`` to the variant's ``.fallback.jsonl`` (why a sample's KLD took the fallback)."""
        with open(self.path(name, ".fallback.jsonl"), "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")


def generate_logged(pool: EndpointPool, log: LogprobLog, seed: int, name: str, task: PreparedTask,
                    indices: Sequence[int], samples: Sequence[Sample], prompt_texts: Sequence[str]
                    ) -> Iterator[list[SampleResult]]:
    """Generate ``samples`` (those of ``indices``, as sent) on the pool, log their tokens, yield them scored;
    ``prompt_texts`` are what is stored as each sample's prompt."""
    n = max(1, task.gen.n)
    seeds = [[row_seed(seed, task.samples[i].id, r) for r in range(n)] for i in indices]
    for idx, gens in pool.generate(list(samples), task.gen, seeds):
        with open(log.path(name), "a", encoding="utf-8") as fh:
            for j, g in zip(idx, gens):
                fh.write(json.dumps({"task": task.name, "id": task.samples[indices[j]].id,
                                     "tokens": g[0].tokens}) + "\n")
        yield [score_sample(task, indices[j], g, name, prompt_texts[j]) for j, g in zip(idx, gens)]
