"""Ray fan-out: (variant x task x shard) units run as Ray tasks; the driver alone writes the store.

Each Ray worker process loads the model once and builds each variant once (a per-process cache), generates and
scores its shard, and returns SampleResults; teacher-forced KLD runs as a second wave of units once the baseline is
stored. A unit whose worker dies is retried by Ray (``max_retries``); the driver drops rows whose ids are already
stored, so a unit is never stored twice. Resume, baselines, stats, gate and report are unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from evalsuite.run.config import RunConfig
from evalsuite.run.prepare import PreparedTask
from evalsuite.run.records import KLDResult, SampleResult, VariantInfo

_CACHE: dict[Any, Any] = {}  # per worker process: the loaded base model and built variants (filled lazily)


@dataclass(frozen=True)
class ModelFactory:
    """Picklable: loads ``load_model(name, dtype)`` in whichever process calls it."""

    name: str = "default"
    dtype: str = "bfloat16"

    def __call__(self) -> Any:
        from evalsuite.models import load_model, offline

        offline()
        return load_model(self.name, self.dtype)


@dataclass(frozen=True)
class Unit:
    """One piece of work: generate (``kind='gen'``) or teacher-forced KLD (``'kld'``) for a shard of a task."""

    kind: str
    spec: dict[str, Any]  # VariantSpec.to_dict()
    name: str  # the stored variant name (baseline + '@noise' for the noise floor)
    task: int  # index into the prepared tasks
    indices: tuple[int, ...]
    batch_size: int
    answers: tuple[str, ...] = ()  # kld: the baseline's stored outputs for these samples


def _state(factory: Callable[[], Any], config: RunConfig, tasks: list[PreparedTask], spec_d: dict) -> tuple:
    """(runner, built variant) for this process, loading/building each at most once."""
    import torch

    from evalsuite.run.runner import Runner
    from evalsuite.variants.build import build_variant
    from evalsuite.variants.spec import variant_from_dict

    torch.set_num_threads(1)
    fingerprint_of(factory)
    base = _CACHE[("base", factory)]
    key = ("variant", factory, repr(sorted(spec_d.items())))
    if key not in _CACHE:
        _CACHE[key] = build_variant(base, variant_from_dict(spec_d))
    runner = Runner(config, base, tasks, store=None, progress=False, log=lambda s: None)  # type: ignore[arg-type]
    return runner, _CACHE[key]


def run_unit(factory: Callable[[], Any], config: RunConfig, tasks: list[PreparedTask], unit: Unit) -> tuple:
    """Executed on a Ray worker: returns ('gen', [SampleResult]) / ('kld', [KLDResult]) / ('info', VariantInfo)."""
    from evalsuite.run.generate import iter_generate
    from evalsuite.run.kld import teacher_forced_kld

    runner, variant = _state(factory, config, tasks, unit.spec)
    if unit.kind == "info":
        return "info", _variant_info(runner, variant, unit.name)
    task = tasks[unit.task]
    prompts = runner.prompts(task)
    if unit.kind == "kld":
        res = teacher_forced_kld(runner.base.model, variant.model, runner.base.tokenizer,
                                 [prompts[i] for i in unit.indices], list(unit.answers), variant.make_cache,
                                 prefix_len=runner.prefix_len(task))
        return "kld", [KLDResult(unit.name, task.name, task.samples[i].id, tuple(k), a, n)
                       for i, (k, a, n) in zip(unit.indices, res)]
    rows: list[SampleResult] = []
    for idx, gens in iter_generate(variant.model, variant.tokenizer, [prompts[i] for i in unit.indices], task.gen,
                                   variant.make_cache, max_batch=unit.batch_size,
                                   max_tokens=config.max_batch_tokens, seed=config.seed,
                                   prefix_len=runner.prefix_len(task)):
        rows += [runner._score(task, unit.indices[i], g, unit.name) for i, g in zip(idx, gens)]
    return "gen", rows


def _variant_info(runner: Any, variant: Any, name: str) -> VariantInfo:
    from evalsuite.kvcache import kv_bytes_per_token
    from evalsuite.run.runner import measure_kv_bytes_per_token

    dtype_bytes = next(variant.model.parameters()).element_size()
    return VariantInfo(variant=name, spec=variant.spec.to_dict(), weight_bytes=variant.weights.measured,
                       weight_formula_bytes=variant.weights.formula,
                       kv_bytes_per_token=measure_kv_bytes_per_token(variant),
                       kv_formula_bytes_per_token=kv_bytes_per_token(variant.spec.kv, variant.model.config,
                                                                      dtype_bytes))


def fingerprint_of(factory: Callable[[], Any]) -> tuple[str, str, str]:
    """Executed on a worker: (fingerprint, name, dtype) of the model the factory loads (cached there)."""
    if ("base", factory) not in _CACHE:
        _CACHE.clear()
        _CACHE[("base", factory)] = factory()
    base = _CACHE[("base", factory)]
    return base.fingerprint, base.name, base.dtype
