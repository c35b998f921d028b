"""evalsuite's batched decoder: shared-prefix prefill, per-row stopping, finished rows dropped from the batch.

Why not ``model.generate``: an evaluation batch keeps decoding until its longest answer ends, and every prompt
of a task repeats the same instructions / few-shot block. This loop

* encodes a task's common token prefix once (batch 1) and starts every batch from a copy of its K/V
  (the layout is ``[prefix][padding][own tokens]``; the mask hides the padding, positions skip it);
* stops each row on EOS, its stop strings, its task's stop rule (``tasks.stop_rules``) or ``max_new_tokens``
  and drops finished rows from the batch (``Cache.reorder_cache`` with the rows kept), so the tail of a batch
  costs what its live rows cost.

KV caches whose prefill is exact (DynamicCache, transformers' QuantizedCache, evalsuite's cache in ``exact``
mode: the prompt attends to full-precision K/V) get the prompt's K/V computed in a DynamicCache and written into
them with one ``update`` per layer, which is what their own prefill stores. A ``quantized``-prefill cache runs the
whole prompt through itself (no prefix reuse), so the prompt's attention reads quantized K/V as it should.
"""
from __future__ import annotations

import contextlib
import inspect
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import QuantizedLayer

from evalsuite.backends.inprocess.growcache import dynamic_layers
from evalsuite.kvcache import track_mask
from evalsuite.models.attention import prompt_prefill
from evalsuite.models.device import synchronize
from evalsuite.tasks import stop_rules
from evalsuite.tasks.base import GenSettings

MIN_PREFIX = 8  # shorter common prefixes are not worth a separate forward
#: ``observer(prefix, rows, full-precision DynamicCache, last logits, mask)`` sees every exact prefill;
#: ``provider(prefix, rows)`` may answer one instead, with (DynamicCache, last logits, mask) or None
_HOOKS: ContextVar[tuple[Callable[..., None] | None, Callable[..., Any] | None]] = ContextVar(
    "evalsuite_prefill_hooks", default=(None, None))


@contextlib.contextmanager
def observe_prefills(observer: Callable[..., None] | None = None,
                     provider: Callable[..., Any] | None = None) -> Iterator[None]:
    """Within the block every exact prefill hands its prompt K/V to ``observer``, and takes them from
    ``provider`` when it has all of the batch's prompts (computed by a model with the same weights); see
    ``run.snapshots``. Other prefills (quantized prefill, sliding-window layouts) are untouched."""
    token = _HOOKS.set((observer, provider))
    try:
        yield
    finally:
        _HOOKS.reset(token)


@dataclass(frozen=True)
class Prefix:
    """A token prefix shared by every prompt, with its per-layer K/V (batch 1) from a DynamicCache.

    ``kv`` is None when the model's cache layout does not allow reuse: the prefix tokens are then fed again."""

    ids: tuple[int, ...]
    kv: tuple[tuple[torch.Tensor, torch.Tensor], ...] | None


@dataclass
class Decoded:
    """One row's generated token ids (EOS excluded), why it stopped and the batch's step timestamps."""

    ids: list[int]
    stamps: list[float] = field(default_factory=list)
    stop: str = ""  # "eos" (a stop token), "stop" (a stop string), "rule" (the task's stop rule), "length"


def common_prefix_len(id_lists: Sequence[Sequence[int]], min_len: int = MIN_PREFIX) -> int:
    """Longest common token prefix, leaving every prompt at least one own token (0 when under ``min_len``)."""
    if len(id_lists) < 2:
        return 0
    first, n = id_lists[0], min(len(x) for x in id_lists) - 1
    p = 0
    while p < n and all(x[p] == first[p] for x in id_lists):
        p += 1
    return p if p >= min_len else 0


def plain_dynamic(model: Any) -> bool:
    """True when the model's DynamicCache keeps every token of every layer (no sliding window / linear layers)."""
    return dynamic_layers(DynamicCache(config=model.config))


@torch.no_grad()
def encode_prefix(model: Any, ids: Sequence[int], cache: Any = None) -> Prefix | None:
    """The prefix ``ids`` with its K/V at batch 1 (None for no prefix). No K/V is computed where it would not be
    used: for a model whose cache layout does not allow reuse, or when ``cache`` (a fresh cache of the kind the
    prompts will run with) has a quantized prefill."""
    if not ids:
        return None
    if not plain_dynamic(model) or not exact_prefill(cache):
        return Prefix(tuple(ids), None)
    cache = DynamicCache(config=model.config)
    with prompt_prefill():
        model(input_ids=torch.tensor([list(ids)], device=model.device), cache=cache, use_cache=True,
              **_last_logits_only(model))
    return Prefix(tuple(ids), tuple((layer.keys, layer.values) for layer in cache.layers))


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


def exact_prefill(cache: Any) -> bool:
    """Whether ``cache``'s prefill lets the prompt attend to full-precision K/V (so a computed prefill transfers)."""
    if cache is None:
        return True
    layers = getattr(cache, "layers", [])
    if dynamic_layers(cache):
        return True
    if all(isinstance(layer, QuantizedLayer) for layer in layers):
        return True  # transformers' QuantizedCache returns the prompt's own K/V on its first update
    plan = getattr(cache, "plan", None)
    return plan is not None and getattr(plan, "prefill", None) == "exact"


def _last_logits_only(model: Any) -> dict[str, Any]:
    params = inspect.signature(model.forward).parameters
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}


@torch.no_grad()
def prefill(model: Any, rows: Sequence[Sequence[int]], prefix: Prefix | None, cache: Any, pad_id: int
            ) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """Run the prompts (each ``prefix.ids + row``); returns (cache, last-position logits, 2-D attention mask).
    An exact prefill may be answered by the ``observe_prefills`` provider instead of a forward."""
    observer, provider = _HOOKS.get()
    transfer = exact_prefill(cache) and plain_dynamic(model)
    given = provider(prefix, rows) if transfer and provider is not None else None
    if given is not None:
        return _transfer(given[0], cache, given[2]), given[1], given[2]
    dev, b = model.device, len(rows)
    p = len(prefix.ids) if prefix else 0
    s = max(len(r) for r in rows)
    own = torch.tensor([[pad_id] * (s - len(r)) + list(r) for r in rows], device=dev)
    mask = torch.ones(b, p + s, dtype=torch.long, device=dev)
    for i, r in enumerate(rows):
        mask[i, p : p + s - len(r)] = 0
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    work = DynamicCache(config=model.config) if transfer or cache is None else cache
    if prefix is not None and prefix.kv is not None and transfer:
        for i, (k, v) in enumerate(prefix.kv):
            work.update(k.expand(b, -1, -1, -1).contiguous(), v.expand(b, -1, -1, -1).contiguous(), i)
        ids, ids_pos = own, pos[:, p:]
    else:
        head = torch.tensor([list(prefix.ids)] * b, device=dev) if prefix else own[:, :0]
        ids, ids_pos = torch.cat([head, own], dim=-1), pos
    track_mask(work, mask)
    with prompt_prefill():
        out = model(input_ids=ids, attention_mask=mask, position_ids=ids_pos, cache=work, use_cache=True,
                    **_last_logits_only(model))
    if transfer and observer is not None:
        observer(prefix, rows, work, out.logits[:, -1, :], mask)
    return (_transfer(work, cache, mask) if transfer else work), out.logits[:, -1, :], mask


def _transfer(work: DynamicCache, cache: Any, mask: torch.Tensor) -> Any:
    """The prompt's full-precision K/V written into ``cache`` (what its own exact prefill stores); ``work``
    itself when there is no cache to fill."""
    if cache is None:
        return work
    return fill_cache(((layer.keys, layer.values) for layer in work.layers), cache, mask=mask)


def fill_cache(layers: Iterable[tuple[torch.Tensor, torch.Tensor]], cache: Any = None, config: Any = None,
               mask: torch.Tensor | None = None) -> Any:
    """Prompt K/V (per layer) written into ``cache`` with one ``update`` per layer, as an exact prefill stores
    them; ``cache`` None: a fresh DynamicCache for ``config``. ``mask``: which columns hold real tokens (a
    quantized cache groups only those)."""
    work = cache if cache is not None else DynamicCache(config=config)
    track_mask(work, mask)
    for i, (k, v) in enumerate(layers):
        work.update(k, v, i)
    return work


def left_pad(rows: Sequence[Sequence[tuple[torch.Tensor, torch.Tensor]]]
             ) -> tuple[tuple[tuple[torch.Tensor, torch.Tensor], ...], torch.Tensor]:
    """Rows' per-layer K/V (``[heads, len, dim]``, a length per row) left-padded with zeros into one batch per
    layer (``[rows, heads, width, dim]``), and the 2-D mask that is 1 on each row's own tokens. Each layer is
    built where the first row holds that layer (a model spread over devices keeps each layer's K/V on its own);
    the mask sits with the first layer, the model's input device."""
    lens = [row[0][0].shape[1] for row in rows]
    width = max(lens)
    mask = torch.zeros(len(rows), width, dtype=torch.long, device=rows[0][0][0].device)
    for b, n in enumerate(lens):
        mask[b, width - n:] = 1
    layers = []
    for i in range(len(rows[0])):
        first = rows[0][i][0]
        k = first.new_zeros(len(rows), first.shape[0], width, first.shape[2])
        v = torch.zeros_like(k)
        for b, row in enumerate(rows):
            k[b, :, width - lens[b]:], v[b, :, width - lens[b]:] = row[i]
        layers.append((k, v))
    return tuple(layers), mask


def pick_tokens(logits: torch.Tensor, gen: GenSettings, rngs: list[torch.Generator] | None) -> torch.Tensor:
    """Greedy, or one sampled token per row, each row from its own generator (independent of batching)."""
    if gen.temperature <= 0 or rngs is None:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / gen.temperature, dim=-1).cpu()
    return torch.cat([torch.multinomial(probs[j], 1, generator=g) for j, g in enumerate(rngs)])


def stop_reached(text_of: Callable[[list[int]], str], ids: list[int], stops: Sequence[str]) -> bool:
    """A stop string ends the row; only the tail that can hold a new match is decoded."""
    tail = ids[-(max(len(s) for s in stops) + 8):]
    return any(s in text_of(tail) for s in stops)


def take_token(row: Decoded, t: int, stop_ids: set[int], gen: GenSettings, stops: Sequence[str],
               text_of: Callable[[list[int]], str]) -> bool:
    """Append token ``t`` to a row's ids unless it is a stop token; True while the row goes on, else the row's
    ``stop`` says why it ended (a stop token, string, the task's stop rule or ``max_new_tokens``)."""
    if t in stop_ids:
        row.stop = "eos"
        return False
    row.ids.append(t)
    if stops and stop_reached(text_of, row.ids, stops):
        row.stop = "stop"
    elif gen.stop_rule and stop_rules.reached(gen.stop_rule, text_of, row.ids):
        row.stop = "rule"
    elif len(row.ids) >= gen.max_new_tokens:
        row.stop = "length"
    return not row.stop


@torch.no_grad()
def decode(model: Any, tokenizer: Any, rows: Sequence[Sequence[int]], gen: GenSettings, prefix: Prefix | None,
           cache: Any, stop_ids: set[int], seed: int = 0, row_seeds: Sequence[int] | None = None
           ) -> list[Decoded]:
    """Greedy (or seeded sampled) decoding of one batch; rows leave the batch as they finish. Sampling draws
    each row from its own generator: ``row_seeds`` (default ``seed + row``). Step stamps are read after the
    device finished the step (``synchronize``)."""
    synchronize(model.device)
    start = time.perf_counter()
    cache, logits, mask = prefill(model, rows, prefix, cache, tokenizer.pad_token_id)
    seeds = list(row_seeds) if row_seeds is not None else [seed + r for r in range(len(rows))]
    rngs = [torch.Generator().manual_seed(int(x)) for x in seeds] if gen.temperature > 0 else None
    return decode_from(model, tokenizer, cache, logits, mask, gen, stop_ids, rngs, [Decoded(ids=[]) for _ in rows],
                       [start])


@torch.no_grad()
def decode_from(model: Any, tokenizer: Any, cache: Any, logits: torch.Tensor, mask: torch.Tensor, gen: GenSettings,
                stop_ids: set[int], rngs: list[torch.Generator] | None, out: list[Decoded], stamps: list[float]
                ) -> list[Decoded]:
    """Decode step by step from a filled ``cache`` whose next-token ``logits`` are given; ``out`` holds each row's
    ids so far (a verified prefix, or none). Rows leave the batch as they finish."""
    live = list(range(len(out)))
    next_pos = mask.sum(-1)
    stops = [s for s in gen.stop if s]
    text_of = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    for _ in range(gen.max_new_tokens):
        tok = pick_tokens(logits, gen, rngs).cpu()
        synchronize(model.device)
        stamps.append(time.perf_counter())
        keep = []
        for j, row in enumerate(live):
            if take_token(out[row], int(tok[j]), stop_ids, gen, stops, text_of):
                keep.append(j)
        if not keep:
            break
        if len(keep) < len(live):
            idx = torch.tensor(keep, device=mask.device)
            cache.reorder_cache(idx)
            mask, next_pos, tok = mask[idx], next_pos[idx], tok[keep]
            live = [live[j] for j in keep]
            rngs = [rngs[j] for j in keep] if rngs is not None else None
        mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=-1)
        track_mask(cache, mask)
        res = model(input_ids=tok[:, None].to(mask.device), attention_mask=mask, position_ids=next_pos[:, None],
                    cache=cache, use_cache=True)
        next_pos = next_pos + 1
        logits = res.logits[:, -1, :]
    for d in out:
        d.stamps = stamps
    return out
