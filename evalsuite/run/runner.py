"""The runner: baseline first, then every variant, on identical samples; each batch stored as it completes."""
from __future__ import annotations

import gc
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from evalsuite.errors import StoreMismatch
from evalsuite.models.loader import LoadedModel
from evalsuite.run.config import RunConfig
from evalsuite.run.generate import iter_generate, shared_prefix_len
from evalsuite.run.prepare import PreparedTask
from evalsuite.run.prompts import render_prompt
from evalsuite.run.records import NOISE_SUFFIX, KLDResult, SampleResult, VariantInfo
from evalsuite.run.store import Store
from evalsuite.run.kld import BaselineLogprobCache, teacher_forced_kld
from evalsuite.variants.build import BuiltVariant, build_variant
from evalsuite.variants.spec import VariantSpec



@dataclass
class Runner:
    """Runs one RunConfig against one loaded model into one store."""

    config: RunConfig
    base: LoadedModel
    tasks: list[PreparedTask]
    store: Store
    progress: bool = True
    log: Callable[[str], None] = print
    baseline_source: Any = None  # evalsuite.run.baselines.BaselineSource, optional
    _prompts: dict[str, list[tuple[str, bool]]] = field(default_factory=dict)
    _prefix: dict[str, int] = field(default_factory=dict)
    _base_lp: BaselineLogprobCache = field(default_factory=BaselineLogprobCache)

    def check_compatible(self) -> None:
        """Refuse to continue a run whose model content or task versions changed."""
        meta = self.store.meta()
        fp = meta.get("fingerprint")
        if fp is not None and fp != self.base.fingerprint:
            raise StoreMismatch(f"model fingerprint changed ({fp} stored, {self.base.fingerprint} loaded): "
                                "start a new run")
        stored = meta.get("task_versions", {})
        for t in self.tasks:
            if t.name in stored and stored[t.name] != t.version:
                raise StoreMismatch(f"task {t.name!r} version changed ({stored[t.name]} stored, {t.version} now)")
        self.store.set_meta({"fingerprint": self.base.fingerprint, "model_name": self.base.name,
                             "dtype": self.base.dtype,
                             "task_versions": {**stored, **{t.name: t.version for t in self.tasks}},
                             "task_params": {t.name: t.params for t in self.tasks},
                             "gen_settings": {t.name: t.gen.to_dict() for t in self.tasks}})

    def prompts(self, task: PreparedTask) -> list[tuple[str, bool]]:
        if task.name not in self._prompts:
            self._prompts[task.name] = [render_prompt(s, self.base.tokenizer) for s in task.samples]
        return self._prompts[task.name]

    def prefix_len(self, task: PreparedTask) -> int:
        """Tokens all of the task's prompts share (so a resumed or sharded subset computes what a full run does)."""
        if task.name not in self._prefix:
            self._prefix[task.name] = shared_prefix_len(self.base.tokenizer, self.prompts(task))
        return self._prefix[task.name]

    def run(self, specs: list[VariantSpec]) -> None:
        """Generate + score every (variant, task); then teacher-forced KLD for every non-baseline variant."""
        self.check_compatible()
        baseline = specs[0]
        self.store.set_meta({"baseline": baseline.name, "variant_order": [s.name for s in specs]})
        for spec in specs:
            variant = build_variant(self.base, spec)
            self._generate_variant(variant, spec.name, self.config.batch_size)
            self._record_info(variant)
            if spec is not baseline and self.config.kld:
                self._kld_variant(variant, baseline.name)
            del variant
            gc.collect()
        if self.config.noise_floor:
            self._noise_floor(baseline)

    def _noise_floor(self, baseline: VariantSpec) -> None:
        """The baseline again with another batch size: its flips and KLD are the floor of what noise does."""
        variant = build_variant(self.base, baseline)
        name = baseline.name + NOISE_SUFFIX
        other = 1 if self.config.batch_size > 1 else 4
        self._generate_variant(variant, name, other)
        if self.config.kld:
            self._kld_variant(variant, baseline.name, name=name, batch_size=other)

    def _generate_variant(self, variant: BuiltVariant, name: str, batch_size: int) -> None:
        for task in self.tasks:
            if self.baseline_source is not None and variant.spec.is_baseline and NOISE_SUFFIX not in name:
                if self.baseline_source.import_into(self.store, task, name):
                    self.log(f"{name}/{task.name}: reused stored baseline")
                    continue
            done = self.store.done_ids(name, task.name)
            todo = [i for i, s in enumerate(task.samples) if s.id not in done]
            if not todo:
                continue
            prompts = self.prompts(task)
            bar = tqdm(total=len(todo), desc=f"{name} · {task.name}", disable=not self.progress, leave=False)
            batches = iter_generate(variant.model, variant.tokenizer, [prompts[i] for i in todo], task.gen,
                                    variant.make_cache, max_batch=batch_size,
                                    max_tokens=self.config.max_batch_tokens, seed=self.config.seed,
                                    prefix_len=self.prefix_len(task))
            for idx, gens in batches:
                rows = [self._score(task, todo[i], g, name) for i, g in zip(idx, gens)]
                self.store.put_samples(rows)
                bar.update(len(rows))
            bar.close()

    def _score(self, task: PreparedTask, i: int, g: Any, name: str) -> SampleResult:
        sample = task.samples[i]
        sc = task.task.score(sample, g.text)
        meta = {k: v for k, v in sample.metadata.items() if isinstance(v, (str, int, float, bool))}
        return SampleResult(variant=name, task=task.name, task_version=task.version, sample_id=sample.id,
                            prompt_hash=sample.content_hash(), output=g.text, score=float(sc.value),
                            extracted=sc.extracted, reason=sc.reason, metadata=meta,
                            prompt=self.prompts(task)[i][0], n_tokens=g.n_tokens, ttft_s=g.ttft_s, itl_s=g.itl_s)

    def _kld_variant(self, variant: BuiltVariant, baseline: str, name: str | None = None,
                     batch_size: int | None = None) -> None:
        name = name or variant.name
        bs = batch_size or max(1, self.config.batch_size // 2)
        for task in self.tasks:
            base_out = {r.sample_id: r.output for r in self.store.samples(baseline, task.name)}
            done = self.store.kld_done(name, task.name)
            todo = [i for i, s in enumerate(task.samples) if s.id not in done and s.id in base_out]
            prompts = self.prompts(task)
            for start in tqdm(range(0, len(todo), bs), desc=f"KLD {name} · {task.name}",
                              disable=not self.progress or not todo, leave=False):
                chunk = todo[start:start + bs]
                ids = [task.samples[i].id for i in chunk]
                res = teacher_forced_kld(self.base.model, variant.model, self.base.tokenizer,
                                         [prompts[i] for i in chunk], [base_out[s] for s in ids],
                                         variant.make_cache, self._base_lp, (task.name, tuple(ids)),
                                         prefix_len=self.prefix_len(task))
                self.store.put_kld(KLDResult(name, task.name, sid, tuple(k), a, n)
                                   for sid, (k, a, n) in zip(ids, res))

    def _record_info(self, variant: BuiltVariant) -> None:
        rows = self.store.samples(variant.name)
        ttft = [r.ttft_s for r in rows if r.ttft_s is not None]
        itl = [r.itl_s for r in rows if r.itl_s is not None]
        from evalsuite.kvcache import kv_bytes_per_token

        self.store.put_variant(VariantInfo(
            variant=variant.name, spec=variant.spec.to_dict(), weight_bytes=variant.weights.measured,
            weight_formula_bytes=variant.weights.formula,
            kv_bytes_per_token=measure_kv_bytes_per_token(variant),
            kv_formula_bytes_per_token=kv_bytes_per_token(variant.spec.kv, variant.model.config,
                                                          next(variant.model.parameters()).element_size()),
            ttft_s=statistics.median(ttft) if ttft else None, itl_s=statistics.median(itl) if itl else None))


def measure_kv_bytes_per_token(variant: BuiltVariant, tokens: int = 640) -> float:
    """Bytes the variant's cache actually holds per token after a ``tokens``-long prefill + one decode step.

    The cache is filled through ``update`` with K/V of the model's shapes and dtype (what a forward would write;
    the byte count does not depend on the values), so no model forward is spent on it.
    """
    import torch
    from transformers import DynamicCache

    from evalsuite.kvcache import cache_nbytes, model_dims

    cfg = variant.model.config
    cache = variant.make_cache() or DynamicCache(config=cfg)
    layers, heads, dim = model_dims(cfg)
    dtype = next(variant.model.parameters()).dtype
    gen = torch.Generator().manual_seed(0)
    for n in (tokens, 1):
        for i in range(layers):
            k, v = (torch.randn(1, heads, n, dim, generator=gen).to(dtype) for _ in range(2))
            cache.update(k, v, i)
    return cache_nbytes(cache) / (tokens + 1)


def open_run(run_dir: Path, config: RunConfig, resume: bool) -> Store:
    """Create a new run store, or reopen one to resume (its stored config wins)."""
    return Store.open(run_dir) if resume else Store.create(run_dir, config.to_dict())
