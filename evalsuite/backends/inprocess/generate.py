"""Batched generation for the runner: length-sorted batches, a shared prompt prefix, stop strings, timings."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from evalsuite.backends.inprocess.decoder import Decoded, Prefix, common_prefix_len, decode, encode_prefix, plan_batches
from evalsuite.backends.inprocess.refill import can_refill, decode_refill
from evalsuite.tasks.base import GenSettings


@dataclass(frozen=True)
class Generation:
    """One generated answer with the timings of the batch it ran in."""

    text: str
    n_tokens: int
    prompt_tokens: int
    ttft_s: float | None
    itl_s: float | None
    ids: tuple[int, ...] = ()  # the generated token ids (stop token excluded)
    stop: str = ""  # why it ended: "eos", "stop" (a stop string), "rule" (the task's stop rule) or "length"
    decode: str = ""  # how it was obtained: "" (generated), "verified", "diverged@t" (run.verify)


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """Truncate at the first stop string (stop strings themselves are not part of the answer)."""
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    return text if cut < 0 else text[:cut]


def encode_prompts(tokenizer: Any, prompts: Sequence[tuple[str, bool]]) -> list[list[int]]:
    """Token ids of rendered prompts (text, add_special_tokens)."""
    return [tokenizer(p, add_special_tokens=a)["input_ids"] for p, a in prompts]


def shared_prefix_len(tokenizer: Any, prompts: Sequence[tuple[str, bool]]) -> int:
    """Tokens every prompt starts with (what the decoder encodes once per task); 0 when not worth it."""
    return common_prefix_len(encode_prompts(tokenizer, prompts))


def generate_batch(model: Any, tokenizer: Any, prompts: Sequence[tuple[str, bool]], gen: GenSettings,
                   make_cache: Callable[[], Any] | None = None, seed: int = 0,
                   prefix: Prefix | None = None) -> list[Generation]:
    """Generate for one batch of rendered prompts (text, add_special_tokens); each must start with ``prefix``."""
    return _generate_ids(model, tokenizer, encode_prompts(tokenizer, prompts), gen, make_cache, seed, prefix)


def _generate_ids(model: Any, tokenizer: Any, ids: list[list[int]], gen: GenSettings,
                  make_cache: Callable[[], Any] | None, seed: int, prefix: Prefix | None,
                  row_seeds: Sequence[int] | None = None) -> list[Generation]:
    p = len(prefix.ids) if prefix else 0
    if prefix is not None and any(tuple(x[:p]) != prefix.ids or len(x) <= p for x in ids):
        raise ValueError("generate_batch: a prompt does not start with the shared prefix")
    cache = make_cache() if make_cache else None
    rows = decode(model, tokenizer, [x[p:] for x in ids], gen, prefix, cache, stop_ids(tokenizer), seed,
                  row_seeds)
    return [_generation(tokenizer, r, len(x), gen) for r, x in zip(rows, ids)]


def _generation(tokenizer: Any, row: Decoded, prompt_tokens: int, gen: GenSettings) -> Generation:
    """A decoded row as text, with TTFT (its prefill) and the median gap between the steps it took part in."""
    stamps = row.stamps
    ttft = stamps[1] - stamps[0] if len(stamps) > 1 else None
    gaps = [b - a for a, b in zip(stamps[1:], stamps[2:])]
    return Generation(text=cut_at_stop(tokenizer.decode(row.ids, skip_special_tokens=True), gen.stop).rstrip(),
                      n_tokens=len(row.ids), prompt_tokens=prompt_tokens, ttft_s=ttft,
                      itl_s=statistics.median(gaps) if gaps else None, ids=tuple(row.ids), stop=row.stop)


def stop_ids(tokenizer: Any) -> set[int]:
    """Token ids that end a row (EOS and padding)."""
    ids = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    return {i for i in ids if i is not None}


def iter_generate(model: Any, tokenizer: Any, prompts: Sequence[tuple[str, bool]], gen: GenSettings,
                  make_cache: Callable[[], Any] | None = None, max_batch: int = 16,
                  max_tokens: int = 24576, seed: int = 0, prefix_len: int | None = None,
                  row_seeds: Sequence[int] | None = None, group: int = 1, refill: bool = True
                  ) -> Iterator[tuple[list[int], list[Generation]]]:
    """Yield (indices, generations) as they complete (length-sorted order) so callers can store as they go.

    The prompts' common token prefix (``prefix_len`` tokens; computed from ``prompts`` when None) is encoded once
    and shared by every batch. Pass the whole task's value when generating a subset (resume, shards), so a
    subset computes exactly what the full run computes. ``group`` consecutive prompts (the n generations of one
    sample) are yielded together; ``row_seeds`` seed each row's sampling. With ``refill`` (and a cache kind that
    allows it, see ``run.refill``) one pool of ``max_batch`` rows decodes everything, a finished row's slot
    taking the next prompt; otherwise each planned batch decodes on its own.
    """
    ids = encode_prompts(tokenizer, prompts)
    p = common_prefix_len(ids) if prefix_len is None else prefix_len
    prefix = encode_prefix(model, ids[0][:p], make_cache() if make_cache else None) if p and ids else None
    heads = list(range(0, len(ids), group))
    plan = plan_batches([len(ids[h]) for h in heads], max(1, max_batch // group), max(1, max_tokens // group))
    if refill and can_refill(model, make_cache() if make_cache else None):
        yield from _iter_refill(model, tokenizer, ids, gen, prefix, row_seeds, seed, group, max_batch, max_tokens,
                                [heads[j] + r for batch in plan for j in batch for r in range(group)])
        return
    for idx in plan:
        rows = [heads[j] + r for j in idx for r in range(group)]
        seeds = [row_seeds[r] for r in rows] if row_seeds is not None else None
        yield rows, _generate_ids(model, tokenizer, [ids[r] for r in rows], gen, make_cache, seed, prefix, seeds)


def _iter_refill(model: Any, tokenizer: Any, ids: list[list[int]], gen: GenSettings, prefix: Prefix | None,
                 row_seeds: Sequence[int] | None, seed: int, group: int, max_batch: int, max_tokens: int,
                 order: list[int]) -> Iterator[tuple[list[int], list[Generation]]]:
    """The refilled pool; a sample's ``group`` rows are yielded together once all of them finished."""
    p = len(prefix.ids) if prefix else 0
    if prefix is not None and any(tuple(x[:p]) != prefix.ids or len(x) <= p for x in ids):
        raise ValueError("iter_generate: a prompt does not start with the shared prefix")
    # default seeds as the per-batch path numbers them: seed + position in the row's batch is batching-dependent,
    # so the refilled pool uses seed + row index (row_seeds, as the runner passes, make both paths agree)
    seeds = list(row_seeds) if row_seeds is not None else [seed + r for r in range(len(ids))]
    done: dict[int, Generation] = {}
    for r, row in decode_refill(model, tokenizer, [x[p:] for x in ids], gen, prefix, stop_ids(tokenizer), seeds,
                                max(1, max_batch), max_tokens, order):
        done[r] = _generation(tokenizer, row, len(ids[r]), gen)
        head = r - r % group
        members = list(range(head, head + group))
        if all(m in done for m in members):
            yield members, [done.pop(m) for m in members]
