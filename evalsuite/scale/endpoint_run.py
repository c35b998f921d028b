"""Run baseline + variants served by OpenAI-compatible endpoints through the Runner's store/score/resume path."""
from __future__ import annotations

import hashlib
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from evalsuite.errors import EvalsuiteError
from evalsuite.models.loader import LoadedModel
from evalsuite.run.config import RunConfig
from evalsuite.run.prepare import PreparedTask
from evalsuite.run.records import KLDResult, VariantInfo
from evalsuite.run.runner import Runner
from evalsuite.run.store import Store
from evalsuite.scale.endpoint import (EndpointBackend, EndpointClient, EndpointSpec, is_endpoint,
                                      parse_endpoint)
from evalsuite.scale.endpoint_kld import topk_kld

BASELINE_ALIASES = ("bf16", "base")
KLD_METHOD = ("top-k logprobs over the shared-context prefix of the two generations, renormalised over the "
              "baseline's top-k (not teacher-forced); see evalsuite/scale/endpoint_kld.py")


def endpoint_specs(config: RunConfig) -> list[EndpointSpec]:
    """The --model endpoint is the baseline; every other variant must be an endpoint (``bf16``/``base`` = it)."""
    specs = [parse_endpoint(config.model)]
    for v in config.variants:
        if isinstance(v, str) and v.strip().lower() in BASELINE_ALIASES:
            continue
        if not isinstance(v, str) or not is_endpoint(v):
            raise EvalsuiteError(f"with an endpoint --model every variant must be an endpoint "
                                 f"(openai:http://HOST:PORT/v1#name); got {v!r}")
        specs.append(parse_endpoint(v))
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise EvalsuiteError(f"endpoint name used twice: {', '.join(dup)} (name them with #NAME)")
    return specs


def probe_all(specs: list[EndpointSpec]) -> tuple[list[EndpointClient], str]:
    """Probe every endpoint before anything is written; the run's fingerprint covers all of them."""
    clients = [EndpointClient(s) for s in specs]
    for c in clients:
        c.probe()
    fps = [c.fingerprint() for c in clients]
    return clients, "endpoints:" + hashlib.sha256("|".join(fps).encode()).hexdigest()[:16]


@dataclass
class EndpointRunner(Runner):
    """A Runner whose variants are endpoints: generation over HTTP, approximate KLD from top-k logprobs."""

    clients: list[EndpointClient] = field(default_factory=list)
    concurrency: int = 4
    top_k: int = 5

    def prompts(self, task: PreparedTask) -> list[tuple[str, bool]]:
        """What each endpoint was sent (chat messages as JSON, or the raw prompt): stored with every sample."""
        if task.name not in self._prompts:
            self._prompts[task.name] = [(s.prompt if s.prompt is not None else json.dumps(list(s.messages)), False)
                                        for s in task.samples]
        return self._prompts[task.name]

    @property
    def logprob_dir(self) -> Path:
        return Path(self.store.path).parent / "endpoint_logprobs"

    def run(self, specs: list[Any]) -> None:
        self.check_compatible()
        self.store.set_meta({"baseline": self.clients[0].spec.name,
                             "variant_order": [c.spec.name for c in self.clients],
                             "endpoints": {c.spec.name: c.spec.url for c in self.clients}})
        for client in self.clients:
            backend = EndpointBackend(client, self.concurrency, self.top_k if self.config.kld else 0,
                                      self.config.seed)
            self._generate_endpoint(backend)
            self._record_endpoint(client.spec)
        if self.config.kld:
            self.store.set_meta({"kld_method": KLD_METHOD})
            for client in self.clients[1:]:
                self._endpoint_kld(client.spec.name, self.clients[0].spec.name)
        if self.config.noise_floor:
            self.log("noise floor: skipped for endpoints (batch size does not apply to a server)")

    def _generate_endpoint(self, backend: EndpointBackend) -> None:
        name = backend.name
        self.logprob_dir.mkdir(parents=True, exist_ok=True)
        for task in self.tasks:
            done = self.store.done_ids(name, task.name)
            todo = [i for i, s in enumerate(task.samples) if s.id not in done]
            if not todo:
                continue
            bar = tqdm(total=len(todo), desc=f"{name} · {task.name}", disable=not self.progress, leave=False)
            for idx, gens in backend.generate([task.samples[i] for i in todo], task.gen):
                with open(self.logprob_dir / f"{name}.jsonl", "a", encoding="utf-8") as fh:
                    for i, g in zip(idx, gens):
                        fh.write(json.dumps({"task": task.name, "id": task.samples[todo[i]].id,
                                             "tokens": g.tokens}) + "\n")
                self.store.put_samples([self._score(task, todo[i], g, name) for i, g in zip(idx, gens)])
                bar.update(len(gens))
            bar.close()

    def _record_endpoint(self, spec: EndpointSpec) -> None:
        itl = [r.itl_s for r in self.store.samples(spec.name) if r.itl_s is not None]
        self.store.put_variant(VariantInfo(variant=spec.name, spec=spec.to_dict(), weight_bytes=0,
                                           weight_formula_bytes=0, kv_bytes_per_token=None,
                                           kv_formula_bytes_per_token=None, ttft_s=None,
                                           itl_s=statistics.median(itl) if itl else None))

    def _load_tokens(self, name: str) -> dict[tuple[str, str], list]:
        path = self.logprob_dir / f"{name}.jsonl"
        out: dict[tuple[str, str], list] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    d = json.loads(line)
                    out[(d["task"], d["id"])] = [(t, lp, tuple(map(tuple, top))) for t, lp, top in d["tokens"]]
        return out

    def _endpoint_kld(self, name: str, baseline: str) -> None:
        base, var = self._load_tokens(baseline), self._load_tokens(name)
        skipped = 0
        for task in self.tasks:
            done = self.store.kld_done(name, task.name)
            rows = []
            for s in task.samples:
                key = (task.name, s.id)
                if s.id in done:
                    continue
                if not base.get(key) or not var.get(key):
                    skipped += 1
                    continue
                kls, agree, n = topk_kld(base[key], var[key])
                rows.append(KLDResult(name, task.name, s.id, kls, agree, n))
            self.store.put_kld(rows)
        if skipped:
            self.log(f"KLD {name}: {skipped} samples skipped (no top-k logprobs returned by a server)")


def execute_endpoint(config: RunConfig, run_dir: Path, resume: bool, progress: bool = True,
                     log: Callable[[str], None] = print, concurrency: int = 4) -> Store:
    """The endpoint counterpart of ``pipeline.execute``: probe servers, prepare samples, run, store."""
    from evalsuite.run.prepare import prepare_tasks
    from evalsuite.tasks.registry import default_registry

    specs = endpoint_specs(config)
    clients, fp = probe_all(specs)  # unreachable server: one-line error before anything is written
    tasks = prepare_tasks(config, default_registry())
    base = LoadedModel(model=None, tokenizer=None, name=config.model, source=clients[0].spec.url,
                       dtype="server", fingerprint=fp, meta={"endpoints": [c.models for c in clients]})
    store = Store.open(run_dir) if resume else Store.create(run_dir, config.to_dict())
    runner = EndpointRunner(config, base, tasks, store, progress=progress, log=log, clients=clients,
                            concurrency=concurrency)
    runner.run(specs)
    store.set_meta({"finished": time.time()})
    return store
