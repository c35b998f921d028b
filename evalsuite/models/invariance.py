"""Batch invariance: a row's logits do not depend on what it is batched with, how it is padded, or how its tokens
are chunked (one per decode step, or many in a teacher-forced pass).

Why: verification (``backends.inprocess.verify``) accepts a variant's greedy answer when a batched teacher-forced pass
picks the baseline's token at every position. That is exact only if the pass computes bit for bit what step-by-step
decoding computes. Ordinary CPU kernels do not: a matmul's reduction order depends on its shape, so a batched pass and a
one-token step round differently, answers drift with batch composition (bf16: about one sample in five regenerates
differently at another batch size), and verification needed near-tie margins that sent most bf16 rows to a decode.

What makes a forward invariant here (measured on the CPUs this project runs on, and probed at run time, never
assumed):

* **Linear layers**: a BLAS GEMM computes each output row with a fixed reduction over the input features once the
  batch has at least ``MIN_ROWS`` rows (fewer rows take a different kernel: fp32 below 8 rows, bf16 at 1 row with
  1,536 features). ``pad_small_batches`` pads such calls with zero rows and drops their outputs.
* **Attention** (``models.attention``): scores from an fp32 matmul over the head dimension with at least
  ``MIN_ROWS`` query rows and ``MIN_KEYS`` key columns; an exact max; a softmax denominator summed exactly (fixed
  point, see there); each row's keys re-laid from column 0 before the probabilities multiply the values, through
  the values' dtype matmul where the probe shows trailing zero (masked) columns leave it bit for bit unchanged
  (bf16 on AVX-512-BF16 CPUs), else in fixed-size float32 blocks (a fixed-size matmul computes each row the same).
* Normalization, activations, rotary embeddings and residual adds are elementwise or reduce one row at a time.

``probe`` checks the matmul properties on this machine at the model's own shapes (a few ms, once per process);
``invariant(model)`` is True only when they hold and every Linear layer is a plain ``nn.Linear`` (quanto's packed
kernels, compressed-tensors modules and other devices are not covered: verification keeps its near-tie margins
there).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from evalsuite.dims import head_dim as config_head_dim
from evalsuite.models.packed import linear_fn, packed_model

#: the name ``models.attention`` registers its kernels under with transformers' AttentionInterface; it is a stored
#: baseline's ``attention`` key, so it changes whenever the kernels' rounding does (inv1: batch-invariant kernels)
NAME = "evalsuite_inv1"
#: fewest rows a Linear or score matmul runs with (smaller calls are padded): measured on AVX-512 EPYCs, float32
#: GEMMs compute a row differently below 8 rows and in the 1-3 rows past 8 (9-11 rows); bf16 at 1 row
MIN_ROWS = 12
#: fewest key columns an attention score matmul runs with: fewer take another fp32 kernel (below 12 on the AVX-512
#: Xeons measured here; on a 2-core AVX-512-BF16 AMD EPYC, 12-row calls compute a row differently at 13-23 keys)
MIN_KEYS = 32
BLOCK = 256  #: keys per partial product of ``attention.block_sum`` (a fixed-size fp32 matmul is row-invariant)


@dataclass(frozen=True)
class Probe:
    """What this machine's matmuls do at a model's shapes (``probe``)."""

    linear: bool  # a Linear's rows do not depend on the other rows (>= MIN_ROWS rows)
    scores: bool  # fp32 query x key rows (and fixed-size blocks) do not depend on the key count, offset or rows
    values: bool  # the value dtype's matmul ignores trailing zero columns exactly (else fixed-size float32 blocks)

    @property
    def ok(self) -> bool:
        return self.linear and self.scores


def _rows_equal(fn: Any, x: torch.Tensor) -> bool:
    """Every row of ``fn`` over batches of MIN_ROWS to 64 rows equals that row computed first in a batch of
    MIN_ROWS (GEMM kernels treat a batch's leftover rows differently: the rows past its last full tile)."""
    alone = {i: fn(torch.cat([x[i:i + 1], x[:MIN_ROWS - 1]]))[0] for i in range(MIN_ROWS + 12)}
    for m in (*range(MIN_ROWS, MIN_ROWS + 12), 31, x.shape[0]):
        out = fn(x[:m])
        if not all(torch.equal(out[i], alone[i]) for i in range(min(m, len(alone)))):
            return False
    return torch.equal(fn(x)[40], fn(torch.cat([x[40:41], x[1:MIN_ROWS]]))[0])


@functools.lru_cache(maxsize=16)
def probe(dtype: torch.dtype, shapes: tuple[tuple[int, int], ...], head_dim: int, packed: bool = False) -> Probe:
    """Check this machine's CPU matmuls for the properties above at ``shapes`` ((in, out) of the Linear layers)
    and ``head_dim``: each on random data, compared bit for bit. ``packed``: the Linear layers run from prepacked
    weights (``models.packed``)."""
    g = torch.Generator().manual_seed(0)
    linear = all(_rows_equal(linear_fn(torch.randn(min(o, 8192), i, generator=g).to(dtype), packed),
                             torch.randn(64, i, generator=g).to(dtype)) for i, o in shapes)  # a vocabulary's slice
    q, k = torch.randn(64, head_dim, generator=g), torch.randn(700, head_dim, generator=g)
    ref = q[:MIN_ROWS] @ k[:300].T
    scores = _rows_equal(lambda x: x @ k[:300].T, q)  # every query row, whatever the batch of query rows
    scores = scores and all(torch.equal((q[:MIN_ROWS] @ k[lead:lead + 300 + tail].T)[:, :300], ref)
                            for lead, tail in ((0, 137), (0, 399)))
    scores = scores and torch.equal((q[:MIN_ROWS] @ torch.cat([k[300:317], k[:300]]).T)[:, 17:], ref)
    # every key count a short cache gives (small GEMMs switch kernels by size: below 24 keys on an AMD EPYC)
    scores = scores and all(torch.equal(q[:MIN_ROWS] @ k[:n].T, ref[:, :n]) for n in (*range(MIN_KEYS, 65), 257))
    p, v = torch.rand(64, BLOCK, generator=g), torch.randn(4, BLOCK, head_dim, generator=g)  # block_sum's size
    scores = scores and _rows_equal(lambda x: x @ v[2], p) and torch.equal(
        torch.matmul(p[:MIN_ROWS].expand(4, MIN_ROWS, BLOCK), v)[2], p[:MIN_ROWS] @ v[2])
    values = True
    for n in (300, 2100, 4100):  # a row's keys from column 0, masked (zero) columns after them
        p, v = torch.rand(64, n, generator=g).to(dtype), torch.randn(n, head_dim, generator=g).to(dtype)
        want = p[:MIN_ROWS] @ v
        values = values and _rows_equal(lambda x: x @ v, p)
        for tail in (1, 37, 1000):
            V = torch.cat([v, torch.randn(tail, head_dim, generator=g).to(dtype)])
            P = torch.cat([p, p.new_zeros(p.shape[0], tail)], dim=1)
            values = values and torch.equal((P @ V)[:MIN_ROWS], want)
            values = values and torch.equal(torch.matmul(P[None, :MIN_ROWS].expand(3, -1, -1), V)[1], want)
    return Probe(linear=linear, scores=scores, values=values)


def linear_shapes(model: Any) -> tuple[tuple[int, int], ...]:
    """The distinct (in, out) shapes of ``model``'s Linear layers."""
    return tuple(sorted({(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)}))


def head_dim(config: Any) -> int:
    cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    return config_head_dim(cfg)


def _pad_rows(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    x = args[0]
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if rows >= MIN_ROWS or rows == 0 or x.device.type != "cpu":
        return None
    module._evalsuite_rows = (x.shape[:-1], rows)
    flat = x.reshape(rows, x.shape[-1])
    return (torch.cat([flat, flat.new_zeros(MIN_ROWS - rows, x.shape[-1])]), *args[1:])


def _unpad_rows(module: torch.nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor | None:
    shape = module.__dict__.pop("_evalsuite_rows", None)
    if shape is None:
        return None
    lead, rows = shape
    return out[:rows].reshape(*lead, out.shape[-1])


def pad_small_batches(model: Any) -> int:
    """Make every plain ``nn.Linear`` of ``model`` run calls of fewer than ``MIN_ROWS`` rows padded to that many
    (idempotent; modules added later, e.g. by quantization, need another call). Returns the modules hooked."""
    hooked = 0
    for mod in _plain_linears(model.modules()):
        if getattr(mod, "_evalsuite_padded", False):
            continue
        mod.register_forward_pre_hook(_pad_rows)
        mod.register_forward_hook(_unpad_rows)
        mod._evalsuite_padded = True
        hooked += 1
    return hooked


def _plain_linears(modules: Iterable[torch.nn.Module]) -> Iterable[torch.nn.Module]:
    return (m for m in modules if type(m) is torch.nn.Linear)


def invariant(model: Any) -> bool:
    """Whether ``model``'s forward is batch-invariant: evalsuite's attention on the CPU, every Linear a padded plain
    ``nn.Linear`` (prepacked or not), no attention soft-capping, and the probe passing at its shapes and dtype."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != NAME:
        return False
    try:
        param = next(model.parameters())
    except StopIteration:
        return False
    if param.device.type != "cpu" or getattr(config, "attn_logit_softcapping", None):
        return False
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if any(type(m) is not torch.nn.Linear or not getattr(m, "_evalsuite_padded", False) for m in linears):
        return False
    return probe(param.dtype, linear_shapes(model), head_dim(config), packed_model(model)).ok
