"""The in-process backend fanned out over Ray: shards of a (variant, task) run as Ray tasks.

Each Ray worker process loads the baseline once (``factory``, picklable) and keeps one built variant at a time
in its own ``InProcessBackend``; a shard is generated *and scored* there (scoring can be heavy: the code task's
sandbox), and comes back as SampleResults. A shard whose worker dies is retried by Ray (``max_retries``); the
Runner drops rows already stored, so nothing is stored twice. Per-row sampling seeds make a shard's answers
independent of which worker ran it, so results equal the in-process run's. ``ray`` is imported only here.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from evalsuite.errors import EvalsuiteError
from evalsuite.models.loader import LoadedModel, ModelFactory  # noqa: F401  (ModelFactory: the usual factory)
from evalsuite.run.backend import ModelIdentity
from evalsuite.backends.inprocess.inprocess import KLD_METHOD, InProcessBackend
from evalsuite.run.prepare import PreparedTask, prepare_variants
from evalsuite.store.records import KLDResult, SampleResult, VariantInfo
from evalsuite.tasks.base import TaskContext
from evalsuite.variants.spec import VariantSpec, variant_from_dict

_WORKER: dict[Any, InProcessBackend] = {}  # per Ray worker process: one backend per (factory, settings)


def _worker_backend(factory: Callable[[], LoadedModel], seed: int, max_batch_tokens: int) -> InProcessBackend:
    key = (factory, seed, max_batch_tokens)
    if key not in _WORKER:
        import torch

        torch.set_num_threads(1)
        _WORKER.clear()
        _WORKER[key] = InProcessBackend(loader=factory, seed=seed, max_batch_tokens=max_batch_tokens, max_built=1,
                                        snapshot_bytes=0)  # a shard's KLD may run on another worker
    return _WORKER[key]


def run_shard(factory: Callable[[], LoadedModel], seed: int, max_batch_tokens: int, kind: str, spec: dict,
              name: str, task: PreparedTask | None, indices: tuple[int, ...], batch_size: int,
              answers: tuple[str, ...] = ()) -> Any:
    """Executed on a Ray worker: 'identity' | 'gen' (SampleResults) | 'kld' (KLDResults) | 'info'."""
    backend = _worker_backend(factory, seed, max_batch_tokens)
    if kind == "identity":
        return backend.load(), backend.settings()
    variant = variant_from_dict(spec)
    if kind == "info":
        return backend.info(variant, name)
    assert task is not None
    if kind == "gen":
        return [r for rows in backend.generate(variant, name, task, indices, batch_size) for r in rows]
    return [r for rows in backend.kld(variant, name, task, indices, answers, batch_size) for r in rows]


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


def worker_factory(factory: Callable[[], LoadedModel]) -> tuple[Callable[[], LoadedModel], int]:
    """(the factory a Ray task loads with, GPUs it asks for). A factory whose ``device`` resolves to CUDA here
    asks Ray for one GPU per task and loads on ``cuda``: Ray shows a task only the GPU it assigned (as cuda:0).
    Otherwise no GPU is asked for, and Ray hides every GPU from the task (``auto`` is then the CPU there)."""
    from dataclasses import replace

    device = getattr(factory, "device", None)
    if device is None:
        return factory, 0
    from evalsuite.models.device import resolve_device

    if resolve_device(device).type != "cuda":
        return factory, 0
    return replace(factory, device="cuda"), 1  # type: ignore[type-var]


@dataclass
class RayBackend:
    """Backend that runs ``InProcessBackend`` shards on Ray (a local instance, or ``address``)."""

    factory: Callable[[], LoadedModel]
    address: str = "local"
    seed: int = 1234
    max_batch_tokens: int = 24576
    num_cpus: int | None = None
    shard_size: int | None = None  # samples per Ray task (default: the batch size)
    max_retries: int = 3
    kld_method: str = KLD_METHOD
    _ray: Any = None
    _started: bool = False
    _remote: Any = None
    _identity: tuple[ModelIdentity, dict[str, Any]] | None = None
    _refs: dict[str, Any] = field(default_factory=dict)

    def variants(self, requested: Sequence[Any]) -> list[VariantSpec]:
        return prepare_variants(list(requested))

    def task_context(self) -> TaskContext:
        return InProcessBackend(loader=self.factory, stop_rules=True).task_context()

    def _submit(self, *args: Any) -> Any:
        if self._ray is None:
            try:
                import ray
            except ImportError:
                raise EvalsuiteError("--ray needs ray: pip install 'evalsuite[ray]'") from None
            self._ray = ray
            self._started = _init_ray(ray, self.address, self.num_cpus)
            factory, gpus = worker_factory(self.factory)
            opts = dict(num_cpus=1, num_gpus=gpus, max_retries=self.max_retries, retry_exceptions=False)
            self._remote = ray.remote(**opts)(run_shard)
            self._refs["factory"] = ray.put(factory)
        return self._remote.remote(self._refs["factory"], self.seed, self.max_batch_tokens, *args)

    def load(self) -> ModelIdentity:
        if self._identity is None:
            self._identity = self._ray_get(self._submit("identity", {}, "", None, (), 0))
        return self._identity[0]

    def settings(self) -> dict[str, Any]:
        self.load()
        assert self._identity is not None
        return self._identity[1]

    def _ray_get(self, ref: Any) -> Any:
        try:
            return self._ray.get(ref)
        except Exception as exc:  # retries exhausted: what finished is stored; --resume continues
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
            raise EvalsuiteError(f"ray task failed after retries: {first[:200]}") from None

    def _fan_out(self, kind: str, variant: VariantSpec, name: str, task: PreparedTask, indices: Sequence[int],
                 batch_size: int, answers: Sequence[str] = ()) -> Iterator[list[Any]]:
        """Submit one Ray task per shard; yield each shard's rows as it completes."""
        size = self.shard_size or batch_size
        task_ref = self._ray.put(task) if self._ray is not None else task
        pending = {}
        for start in range(0, len(indices), size):
            shard = tuple(indices[start:start + size])
            shard_answers = tuple(answers[start:start + size]) if answers else ()
            ref = self._submit(kind, variant.to_dict(), name, task_ref, shard, batch_size, shard_answers)
            pending[ref] = shard
        while pending:
            ready, _ = self._ray.wait(list(pending), num_returns=1)
            pending.pop(ready[0])
            yield self._ray_get(ready[0])

    def generate(self, variant: VariantSpec, name: str, task: PreparedTask, indices: Sequence[int],
                 batch_size: int) -> Iterator[list[SampleResult]]:
        return self._fan_out("gen", variant, name, task, indices, batch_size)

    def kld(self, variant: VariantSpec, name: str, task: PreparedTask, indices: Sequence[int],
            answers: Sequence[str], batch_size: int) -> Iterator[list[KLDResult]]:
        return self._fan_out("kld", variant, name, task, indices, batch_size, answers)

    def same_as_baseline(self, variant: VariantSpec) -> bool:
        """Variants are built on the workers: every one runs (its answers then show it)."""
        return False

    def verifies(self, variant: VariantSpec) -> str:
        """Workers generate every answer (the baseline's answers are not shipped to them for verification)."""
        return "Ray workers generate every answer"

    def info(self, variant: VariantSpec, name: str) -> VariantInfo:
        return self._ray_get(self._submit("info", variant.to_dict(), name, None, (), 0))

    def release(self, variant: VariantSpec) -> None:
        """Workers keep one built variant at a time; the next one replaces it."""

    def close(self) -> None:
        if self._started and self._ray is not None:
            self._ray.shutdown()
        self._ray, self._started = None, False
