"""The Ray driver: plan units, submit them, and write every result into the store (the only writer)."""
from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

from evalsuite.errors import EvalsuiteError
from evalsuite.models.loader import LoadedModel
from evalsuite.run.config import RunConfig
from evalsuite.run.prepare import PreparedTask
from evalsuite.run.records import NOISE_SUFFIX
from evalsuite.run.runner import Runner
from evalsuite.run.store import Store
from evalsuite.scale.ray_exec import ModelFactory, Unit, fingerprint_of, run_unit
from evalsuite.variants.spec import VariantSpec


def _init_ray(ray: Any, address: str, num_cpus: int | None) -> bool:
    """Connect to ``address`` or start a local instance (returns True when we started it)."""
    if ray.is_initialized():
        return False
    paths = [p for p in sys.path if p and os.path.isdir(p) and "site-packages" not in p and "lib/python" not in p]
    env = {"PYTHONPATH": os.pathsep.join([os.getcwd(), *paths]), "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    if address == "local":
        ray.init(num_cpus=num_cpus, **kw)
    else:
        ray.init(address=address, **kw)
    return True


def _shards(n: list[int], size: int) -> list[tuple[int, ...]]:
    return [tuple(n[i:i + size]) for i in range(0, len(n), size)]


@dataclasses.dataclass
class RayDriver:
    """Submits units and stores their results as they arrive (dropping ids already stored)."""

    config: RunConfig
    tasks: list[PreparedTask]
    store: Store
    submit: Callable[[Unit], Any]
    log: Callable[[str], None] = print
    shard_size: int = 8

    def gen_units(self, spec: VariantSpec, name: str, batch_size: int) -> list[Unit]:
        units = []
        for t, task in enumerate(self.tasks):
            done = self.store.done_ids(name, task.name)
            todo = [i for i, s in enumerate(task.samples) if s.id not in done]
            units += [Unit("gen", spec.to_dict(), name, t, sh, batch_size) for sh in _shards(todo, self.shard_size)]
        return units

    def kld_units(self, spec: VariantSpec, name: str, baseline: str, batch_size: int) -> list[Unit]:
        units = []
        for t, task in enumerate(self.tasks):
            base_out = {r.sample_id: r.output for r in self.store.samples(baseline, task.name)}
            done = self.store.kld_done(name, task.name)
            todo = [i for i, s in enumerate(task.samples) if s.id not in done and s.id in base_out]
            for sh in _shards(todo, batch_size):
                answers = tuple(base_out[task.samples[i].id] for i in sh)
                units.append(Unit("kld", spec.to_dict(), name, t, sh, batch_size, answers))
        return units

    def drain(self, ray: Any, units: list[Unit]) -> list[Any]:
        """Run units to completion; store gen/kld results; return 'info' payloads."""
        refs = {self.submit(u): u for u in units}
        infos = []
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            unit = refs.pop(ready[0])
            try:
                kind, payload = ray.get(ready[0])
            except Exception as exc:  # retries exhausted: what finished is stored; --resume continues
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
                raise EvalsuiteError(f"ray unit {unit.kind} {unit.name}/{self.tasks[unit.task].name} failed "
                                     f"after retries: {first[:200]}") from None
            task = self.tasks[unit.task].name if unit.kind != "info" else ""
            if kind == "gen":
                done = self.store.done_ids(unit.name, task)
                self.store.put_samples([r for r in payload if r.sample_id not in done])
            elif kind == "kld":
                done = self.store.kld_done(unit.name, task)
                self.store.put_kld([k for k in payload if k.sample_id not in done])
            else:
                infos.append(payload)
        return infos

    def store_infos(self, infos: list[Any]) -> None:
        for info in infos:
            rows = self.store.samples(info.variant)
            ttft = [r.ttft_s for r in rows if r.ttft_s is not None]
            itl = [r.itl_s for r in rows if r.itl_s is not None]
            self.store.put_variant(dataclasses.replace(
                info, ttft_s=statistics.median(ttft) if ttft else None,
                itl_s=statistics.median(itl) if itl else None))


def execute_ray(config: RunConfig, run_dir: Path, resume: bool, address: str = "local", progress: bool = True,
                log: Callable[[str], None] = print, factory: Callable[[], Any] | None = None,
                tasks: list[PreparedTask] | None = None, num_cpus: int | None = None,
                shard_size: int | None = None, max_retries: int = 3, baselines: Path | None = None,
                strict_baseline: bool = False) -> Store:
    """``pipeline.execute`` over Ray: same store contents, generated by (variant x task x shard) Ray tasks."""
    try:
        import ray
    except ImportError:
        raise EvalsuiteError("--ray needs ray: pip install 'evalsuite[ray]'") from None
    from evalsuite.run.prepare import prepare_tasks, prepare_variants
    from evalsuite.tasks.registry import default_registry

    specs = prepare_variants(config)
    tasks = tasks if tasks is not None else prepare_tasks(config, default_registry())
    factory = factory or ModelFactory(config.model, config.dtype)
    started = _init_ray(ray, address, num_cpus)
    try:
        opts = dict(num_cpus=1, max_retries=max_retries, retry_exceptions=False)
        fp, name, dtype = ray.get(ray.remote(**opts)(fingerprint_of).remote(factory))
        store = Store.open(run_dir) if resume else Store.create(run_dir, config.to_dict())
        base = LoadedModel(model=None, tokenizer=None, name=name, source="ray", dtype=dtype, fingerprint=fp)
        Runner(config, base, tasks, store, progress=False, log=log).check_compatible()
        store.set_meta({"baseline": specs[0].name, "variant_order": [s.name for s in specs]})
        remote = ray.remote(**opts)(run_unit)
        refs = [ray.put(factory), ray.put(config), ray.put(tasks)]
        driver = RayDriver(config, tasks, store, lambda u: remote.remote(*refs, u), log,
                           shard_size or config.batch_size)
        _run_waves(ray, driver, specs, baselines, strict_baseline, base)
        store.set_meta({"finished": time.time()})
        return store
    finally:
        if started:
            ray.shutdown()


def _run_waves(ray: Any, driver: RayDriver, specs: list[VariantSpec], baselines: Path | None, strict: bool,
               base: LoadedModel) -> None:
    """Wave 1: generation of every variant (+ noise floor) and their infos; wave 2: KLD vs the stored baseline."""
    config, baseline = driver.config, specs[0]
    if baselines is not None:
        from evalsuite.run.baselines import BaselineSource

        source = BaselineSource(baselines, base.fingerprint, config.seed, strict=strict, log=driver.log)
        for task in driver.tasks:
            if source.import_into(driver.store, task, baseline.name):
                driver.log(f"{baseline.name}/{task.name}: reused stored baseline")
    other = 1 if config.batch_size > 1 else 4
    runs = [(s, s.name, config.batch_size) for s in specs]
    if config.noise_floor:
        runs.append((baseline, baseline.name + NOISE_SUFFIX, other))
    units = [u for s, n, b in runs for u in driver.gen_units(s, n, b)]
    units += [Unit("info", s.to_dict(), s.name, 0, (), 0) for s in specs]
    driver.store_infos(driver.drain(ray, units))
    if config.kld:
        kb = max(1, config.batch_size // 2)
        kld = [u for s in specs[1:] for u in driver.kld_units(s, s.name, baseline.name, kb)]
        if config.noise_floor:
            kld += driver.kld_units(baseline, baseline.name + NOISE_SUFFIX, baseline.name, other)
        driver.drain(ray, kld)
