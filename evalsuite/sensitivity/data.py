"""The measurement slice: a few samples of each task (the same ones ``evalsuite run --limit N`` picks), their
rendered prompts, and the baseline's greedy answers (generated once, capped), grouped into length-sorted batches."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from evalsuite.core.config import RunConfig
from evalsuite.backends.inprocess.generate import encode_prompts, generate_batch, plan_batches
from evalsuite.run.prepare import prepare_tasks
from evalsuite.run.prompts import render_prompt
from evalsuite.sensitivity.forward import Batch


@dataclass
class Slice:
    """The batches to measure on, and what they hold."""

    batches: list[Batch]
    tasks: list[str]
    samples: int
    prompt_tokens: int
    answer_tokens: int


def load_slice(loaded: Any, tasks: list[str], limit: int, seed: int, params: dict[str, dict],
               max_new_tokens: int, batch_size: int, task_config: str | None = None) -> Slice:
    """Samples as ``evalsuite run --tasks T --limit N --seed S --param ... [--task-config DIR]`` makes them; the
    baseline answers
    each (greedy, the task's stop strings, at most ``max_new_tokens``); answers are re-tokenized as the runner's
    KLD does (an empty answer becomes EOS)."""
    from evalsuite.tasks.registry import default_registry

    config = RunConfig(model="default", variants=["bf16"], tasks=tasks, task_params=params, task_config=task_config,
                       seed=seed, limit=limit)
    tok = loaded.tokenizer
    prompts: list[list[int]] = []
    answers: list[list[int]] = []
    for task in prepare_tasks(config, default_registry()):
        rendered = [render_prompt(s, tok) for s in task.samples]
        gen = replace(task.gen, max_new_tokens=min(task.gen.max_new_tokens, max_new_tokens), n=1, temperature=0.0)
        ids = encode_prompts(tok, rendered)
        for idx in plan_batches([len(x) for x in ids], batch_size, 1 << 30):
            outs = generate_batch(loaded.model, tok, [rendered[i] for i in idx], gen)
            for i, out in zip(idx, outs):
                ans = tok(out.text, add_special_tokens=False)["input_ids"][:max_new_tokens] if out.text else []
                prompts.append(ids[i])
                answers.append(ans or [tok.eos_token_id])
    order = plan_batches([len(p) + len(a) for p, a in zip(prompts, answers)], batch_size, 1 << 30)
    batches = [Batch([prompts[i] for i in idx], [answers[i] for i in idx], tok.pad_token_id) for idx in order]
    return Slice(batches, tasks, len(prompts), sum(map(len, prompts)), sum(map(len, answers)))
