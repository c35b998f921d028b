"""Per-unit sensitivity: KLD from the baseline when only one unit (a layer's or a module's weights, or one
layer's KV cache) is quantized, and the KLD of whole or mixed variants, all on one slice.

The baseline's answer log-probs and its per-layer inputs are computed once per batch; a weight unit in layer
``i`` reruns only layers ``i..``; a KV layer reuses the baseline's prompt K/V and reruns only the answer chunk.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import torch

from evalsuite.kvcache import make_cache
from evalsuite.kvcache.config import KVConfig
from evalsuite.sensitivity.forward import Batch, PromptState, chunked_pass, kld_sums, prompt_prefill, single_pass
from evalsuite.sensitivity.units import Unit, merged, quantize_units, swapped, weight_units


@dataclass(frozen=True)
class UnitResult:
    """One unit's KLD when it alone is quantized."""

    side: str  # "weights" | "kv"
    unit: str  # spec pattern: l3, l3.mlp.down_proj (weights) or l3 (KV layer)
    layer: int
    kld: float  # mean KL(baseline || variant) per answer token
    top1: float  # top-1 agreement with the baseline
    params: int  # Linear parameters of the unit (weights), 0 for KV


@dataclass
class Measured:
    kld: float
    top1: float
    tokens: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Baseline:
    """Per batch: the baseline's single-pass log-probs and layer inputs, and (lazily) its chunked pass."""

    batch: Batch
    lp: torch.Tensor
    hidden: list[torch.Tensor]
    state: PromptState | None = None
    chunked_lp: torch.Tensor | None = None


@dataclass
class Sensitivity:
    """Everything one ``evalsuite sensitivity`` run measures."""

    results: list[UnitResult] = field(default_factory=list)
    variant_kld: Measured | None = None
    seconds: float = 0.0

    def ranked(self, side: str | None = None) -> list[UnitResult]:
        return sorted((r for r in self.results if side in (None, r.side)), key=lambda r: -r.kld)


class Measurer:
    """Holds the baseline's passes over a slice and measures variants of it against them."""

    def __init__(self, model: Any, batches: list[Batch]) -> None:
        self.model = model
        self.base = []
        for b in batches:
            lp, hidden = single_pass(model, b, capture=True)
            self.base.append(Baseline(b, lp.to(torch.bfloat16), hidden))

    def _chunked_base(self, base: Baseline) -> tuple[PromptState, torch.Tensor]:
        if base.state is None:
            base.state = prompt_prefill(self.model, base.batch)
            base.chunked_lp = chunked_pass(self.model, base.batch, base.state, None).to(torch.bfloat16)
        return base.state, base.chunked_lp

    def _pool(self, per_batch: Callable[[Baseline], tuple[float, int, int]]) -> Measured:
        kl = agree = n = 0
        for base in self.base:
            s, a, t = per_batch(base)
            kl, agree, n = kl + s, agree + a, n + t
        return Measured(kl / max(n, 1), agree / max(n, 1), n)

    def weights(self, modules: dict[str, torch.nn.Module], start: int = 0) -> Measured:
        """KLD with ``modules`` swapped in; ``start``: the first layer they touch (earlier layers are reused)."""
        def one(base: Baseline) -> tuple[float, int, int]:
            lp, _ = single_pass(self.model, base.batch, start, base.hidden)
            return kld_sums(base.lp.float(), lp.to(torch.bfloat16).float(), base.batch.answer_lens)

        with swapped(self.model, modules):
            return self._pool(one)

    def kv(self, config: KVConfig, modules: dict[str, torch.nn.Module] | None = None) -> Measured:
        """KLD of a KV cache config (optionally with quantized weight ``modules``) over the answer chunk."""
        def one(base: Baseline) -> tuple[float, int, int]:
            state, ref = self._chunked_base(base)
            if modules:  # the weights change the prompt's K/V too: prefill again
                state = prompt_prefill(self.model, base.batch)
            lp = chunked_pass(self.model, base.batch, state, make_cache(config, self.model.config))
            return kld_sums(ref.float(), lp.to(torch.bfloat16).float(), base.batch.answer_lens)

        with swapped(self.model, modules or {}):
            return self._pool(one)


def only_layer(config: KVConfig, layer: int, num_layers: int) -> KVConfig:
    """``config`` with every layer but ``layer`` kept unquantized (bits 16)."""
    ranges = [r for r in ((0, layer - 1, 16), (layer + 1, num_layers - 1, 16)) if r[0] <= r[1]]
    return replace(config, layer_bits=tuple(ranges))


def kv_keep(config: KVConfig, layers: list[int]) -> KVConfig:
    """``config`` with ``layers`` kept unquantized (existing per-layer bits of other layers kept)."""
    rest = tuple(r for r in config.layer_bits if not any(r[0] <= i <= r[1] for i in layers))
    return replace(config, layer_bits=rest + tuple((i, i, 16) for i in sorted(layers)))


def run_units(measurer: Measurer, spec: Any, unit_kind: str, log: Callable[[str], None] = print
              ) -> tuple[Sensitivity, list[Unit], dict[str, dict[str, torch.nn.Module]]]:
    """Measure every weight unit and every KV layer of ``spec`` one at a time; then the whole variant."""
    start = time.perf_counter()
    model, out = measurer.model, Sensitivity()
    units, qunits = [], {}
    if spec.weights.fmt != "none":
        units = weight_units(model, spec.weights, unit_kind)
        qunits = quantize_units(model, spec.weights, units)
        for u in units:
            m = measurer.weights(qunits[u.pattern], start=u.layer)
            params = sum(model.get_submodule(n).weight.numel() for n in u.modules)
            out.results.append(UnitResult("weights", u.pattern, u.layer, m.kld, m.top1, params))
            log(f"  weights {u.pattern:<22} KLD {m.kld:.4f}  top-1 {m.top1:.3f}")
    if spec.kv is not None:
        n_layers = len(model.model.layers)
        for i in range(n_layers):
            m = measurer.kv(only_layer(spec.kv, i, n_layers))
            out.results.append(UnitResult("kv", f"l{i}", i, m.kld, m.top1, 0))
            log(f"  kv      l{i:<21} KLD {m.kld:.4f}  top-1 {m.top1:.3f}")
    out.variant_kld = measure_variant(measurer, spec, qunits)
    out.seconds = time.perf_counter() - start
    return out, units, qunits


def measure_variant(measurer: Measurer, spec: Any, qunits: dict[str, dict[str, torch.nn.Module]],
                    keep: tuple[str, ...] = (), kv_keep_layers: tuple[int, ...] = ()) -> Measured:
    """KLD of the (mixed) variant: every weight unit quantized except ``keep``; KV layers ``kv_keep_layers``
    unquantized. Measured, never summed."""
    modules = merged(qunits, keep)
    if spec.kv is None:
        return measurer.weights(modules)
    return measurer.kv(kv_keep(spec.kv, list(kv_keep_layers)) if kv_keep_layers else spec.kv, modules)
