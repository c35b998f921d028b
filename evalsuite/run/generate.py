"""Batched greedy generation with left padding, stop strings, per-variant KV caches and step timings."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from evalsuite.tasks.base import GenSettings


@dataclass(frozen=True)
class Generation:
    """One generated answer with the timings of the batch it ran in."""

    text: str
    n_tokens: int
    prompt_tokens: int
    ttft_s: float | None
    itl_s: float | None


class _StepClock(StoppingCriteria):
    """Records a timestamp after every decoding step; never stops generation itself."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        self.stamps.append(time.perf_counter())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def plan_batches(lengths: Sequence[int], max_batch: int, max_tokens: int) -> list[list[int]]:
    """Length-sorted batches of indices, each at most ``max_batch`` prompts and ``max_tokens`` padded tokens."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        longest = max([lengths[j] for j in cur] + [lengths[i]])
        if cur and (len(cur) >= max_batch or longest * (len(cur) + 1) > max_tokens):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """Truncate at the first stop string (stop strings themselves are not part of the answer)."""
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    return text if cut < 0 else text[:cut]


@torch.no_grad()
def generate_batch(model: Any, tokenizer: Any, prompts: Sequence[tuple[str, bool]], gen: GenSettings,
                   make_cache: Callable[[], Any] | None = None, seed: int = 0) -> list[Generation]:
    """Generate for one batch of rendered prompts (text, add_special_tokens); left padded."""
    add_special = all(a for _, a in prompts)
    enc = tokenizer([p for p, _ in prompts], return_tensors="pt", padding=True, add_special_tokens=add_special)
    clock = _StepClock()
    kwargs: dict[str, Any] = dict(max_new_tokens=gen.max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                  stopping_criteria=StoppingCriteriaList([clock]))
    if gen.temperature > 0:
        torch.manual_seed(seed)
        kwargs.update(do_sample=True, temperature=gen.temperature, top_p=1.0, top_k=0)
    else:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    if gen.stop:
        kwargs.update(stop_strings=list(gen.stop), tokenizer=tokenizer)
    cache = make_cache() if make_cache else None
    if cache is not None:
        kwargs["cache"] = cache
    start = time.perf_counter()
    out = model.generate(**enc.to(model.device), **kwargs)
    new = out[:, enc["input_ids"].shape[1]:]
    ttft = clock.stamps[0] - start if clock.stamps else None
    gaps = [b - a for a, b in zip(clock.stamps, clock.stamps[1:])]
    itl = statistics.median(gaps) if gaps else None
    results = []
    for row, mask in zip(new, enc["attention_mask"]):
        ids = row.tolist()
        n = next((k for k, t in enumerate(ids) if t in _stop_ids(tokenizer)), len(ids))
        text = cut_at_stop(tokenizer.decode(ids[:n], skip_special_tokens=True), gen.stop)
        results.append(Generation(text=text.rstrip(), n_tokens=n, prompt_tokens=int(mask.sum()), ttft_s=ttft,
                                  itl_s=itl))
    return results


def _stop_ids(tokenizer: Any) -> set[int]:
    ids = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    return {i for i in ids if i is not None}


def iter_generate(model: Any, tokenizer: Any, prompts: Sequence[tuple[str, bool]], gen: GenSettings,
                  make_cache: Callable[[], Any] | None = None, max_batch: int = 16,
                  max_tokens: int = 24576, seed: int = 0) -> Iterator[tuple[list[int], list[Generation]]]:
    """Yield (indices, generations) batch by batch (length-sorted) so callers can store as they go."""
    lengths = [len(tokenizer(p, add_special_tokens=a)["input_ids"]) for p, a in prompts]
    for idx in plan_batches(lengths, max_batch, max_tokens):
        yield idx, generate_batch(model, tokenizer, [prompts[i] for i in idx], gen, make_cache, seed)
