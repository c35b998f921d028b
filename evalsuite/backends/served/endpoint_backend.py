"""OpenAI-compatible servers as a Backend: the ``--model`` endpoint is the baseline, every variant an endpoint.

Generation goes over HTTP on a bounded thread pool (``EndpointPool``); the prompt stored with each sample is what
the server was sent (chat messages as JSON, or the raw prompt). Servers cannot be teacher-forced through the chat
API, so KLD is approximated from the top-k log-probs both servers returned for their own answers
(``endpoint_kld.topk_kld``); the per-token log-probs are kept next to the run's store so a resumed run can still
compare them.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from evalsuite.errors import EvalsuiteError
from evalsuite.run.backend import ModelIdentity
from evalsuite.run.prepare import PreparedTask
from evalsuite.store.records import KLDResult, SampleResult, VariantInfo
from evalsuite.backends.served.endpoint import EndpointClient, EndpointPool, EndpointSpec, is_endpoint, parse_endpoint
from evalsuite.backends.served.endpoint_kld import topk_kld
from evalsuite.backends.served.logprob_log import LogprobLog, generate_logged
from evalsuite.tasks.base import TaskContext

BASELINE_ALIASES = ("bf16", "base")
KLD_METHOD = ("top-k logprobs over the shared-context prefix of the two generations, renormalised over the "
              "baseline's top-k (not teacher-forced); see evalsuite/backends/served/endpoint_kld.py")


def endpoint_specs(model: str, requested: Sequence[Any]) -> list[EndpointSpec]:
    """The --model endpoint is the baseline; every other variant must be an endpoint (``bf16``/``base`` = it)."""
    specs = [parse_endpoint(model)]
    for v in requested:
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


@dataclass
class EndpointBackend:
    """Backend over OpenAI-compatible servers; ``workdir`` (the run folder) keeps the returned log-probs."""

    model: str
    workdir: Path
    seed: int = 1234
    concurrency: int = 4
    top_k: int = 5  # 0: ask for no log-probs (no KLD)
    kld_method: str = KLD_METHOD
    _clients: dict[str, EndpointClient] = field(default_factory=dict)
    _baseline: str = ""

    def variants(self, requested: Sequence[Any]) -> list[EndpointSpec]:
        specs = endpoint_specs(self.model, requested)
        self._baseline = specs[0].name
        self._clients = {s.name: EndpointClient(s) for s in specs}
        return specs

    def load(self) -> ModelIdentity:
        """Probe every endpoint (an unreachable one is a one-line error); the fingerprint covers all of them."""
        if not self._clients:
            self.variants([])
        for c in self._clients.values():
            if not c.models:
                c.probe()
        fps = [c.fingerprint() for c in self._clients.values()]
        fp = "endpoints:" + hashlib.sha256("|".join(fps).encode()).hexdigest()[:16]
        first = self._clients[self._baseline]
        return ModelIdentity(name=self.model, fingerprint=fp, dtype="server", source=first.spec.url,
                             meta={"endpoints": {n: c.spec.url for n, c in self._clients.items()}})

    def settings(self) -> dict[str, Any]:
        """What keys a stored baseline beside the endpoints' fingerprint: the baseline's URL, the model it serves
        and what the server says about itself (``EndpointClient.server_facts``)."""
        base = self._clients.get(self._baseline)
        if base is None:
            return {"backend": "endpoint", "compute_dtype": "server"}
        return {"backend": "endpoint", "compute_dtype": "server", "endpoint_url": base.spec.url,
                "endpoint_model": base.served_model, "endpoint_server": base.server_facts()}

    def task_context(self) -> TaskContext:
        return TaskContext(model_name=self.model)  # a served model's tokenizer is not known here

    @staticmethod
    def prompt_text(task: PreparedTask, i: int) -> str:
        s = task.samples[i]
        return s.prompt if s.prompt is not None else json.dumps(list(s.messages or ()))

    def generate(self, variant: EndpointSpec, name: str, task: PreparedTask, indices: Sequence[int],
                 batch_size: int) -> Iterator[list[SampleResult]]:
        pool = EndpointPool(self._clients[variant.name], self.concurrency, self.top_k)
        yield from generate_logged(pool, LogprobLog(self.workdir), self.seed, name, task, indices,
                                   [task.samples[i] for i in indices],
                                   [self.prompt_text(task, i) for i in indices])

    def kld(self, variant: EndpointSpec, name: str, task: PreparedTask, indices: Sequence[int],
            answers: Sequence[str], batch_size: int) -> Iterator[list[KLDResult]]:
        """Top-k approximation; samples without log-probs from either server are skipped (none stored)."""
        log = LogprobLog(self.workdir)
        base, var = log.read(self._baseline), log.read(name)
        rows = []
        for i in indices:
            key = (task.name, task.samples[i].id)
            if base.get(key) and var.get(key):
                kls, agree, n = topk_kld(base[key], var[key])
                rows.append(KLDResult(name, task.name, key[1], kls, agree, n))
        yield rows

    def same_as_baseline(self, variant: EndpointSpec) -> bool:
        """A server's weights cannot be compared with the baseline's."""
        return False

    def verifies(self, variant: EndpointSpec) -> str:
        """Served variants generate every answer (a teacher-forced pass through a server is not verified)."""
        return "served variants generate every answer"

    def info(self, variant: EndpointSpec, name: str) -> VariantInfo:
        return VariantInfo(variant=name, spec=variant.to_dict(), weight_bytes=0, weight_formula_bytes=0)

    def release(self, variant: EndpointSpec) -> None:
        """Nothing is held per variant."""

    def close(self) -> None:
        """Nothing to shut down."""
