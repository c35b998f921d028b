"""``--engine vllm``: the baseline and every variant served by vLLM servers that evalsuite starts and stops.

The same engine serves both sides of every pair (cross-engine numerics alone flip answers: docs/vllm.md). Prompts
are rendered by the baseline's tokenizer (its chat template) in this process and sent raw to ``/completions``, so
every server sees the same text; each server's tokenizer is checked against the baseline's first
(``scale.served_pairing``). Generation reuses the endpoint client (``scale.endpoint``: bounded thread pool,
retries) and stores each sample as it arrives, so a server that dies mid-run leaves a resumable run. KLD is
teacher-forced on the baseline's answer ids through ``prompt_logprobs`` on both servers (``backends.served.kld``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from evalsuite.errors import EvalsuiteError
from evalsuite.run.backend import ModelIdentity
from evalsuite.run.prepare import PreparedTask
from evalsuite.store.records import KLDResult, SampleResult, VariantInfo
from evalsuite.backends.served.endpoint import EndpointClient, EndpointPool, EndpointSpec
from evalsuite.backends.served.logprob_log import LogprobLog, generate_logged
from evalsuite.backends.served.pairing import check_served_pairing
from evalsuite.backends.served.vllm import kld as skld
from evalsuite.backends.served.vllm.memory import Device, MemoryPlan, check_windows, context_needed, plan_memory
from evalsuite.backends.served.vllm.pool import EngineOptions, ServerPool
from evalsuite.backends.served.vllm.server import VllmServer, vllm_devices, vllm_libraries, vllm_python, vllm_version
from evalsuite.backends.served.vllm.sizes import kv_bytes_per_token, served_weight_bytes, server_need
from evalsuite.backends.served.vllm.specs import ServedVariant, flag_values, served_variants
from evalsuite.tasks.base import TaskContext


#: weight quantizations vLLM's CPU build cannot run (0.32: ``--quantization fp8`` dies loading the weights with
#: "_C::static_scaled_fp8_quant() expected at most 0 argument(s)": the FP8 quantize kernel is CUDA/ROCm only)
NO_CPU_QUANTIZATION = ("fp8", "fp8_per_tensor")  # fp8 is vLLM 0.32's deprecated alias of fp8_per_tensor
#: what vLLM's CPU attention needs for an FP8 KV cache (0.32, ``cpu_attn._get_attn_isa``: torch's AVX-512 level,
#: i.e. these four flags, or AMX tiles); without them the server dies after its ~5-minute warm-up
FP8_KV_AVX512 = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})


def fp8_kv_runs(cpu: set[str]) -> bool:
    """Whether vLLM's CPU backend can run an FP8 KV cache on a CPU with these feature flags."""
    return FP8_KV_AVX512 <= cpu or "amx_tile" in cpu


def refuse_unsupported(specs: Sequence[ServedVariant], device: str, version: str,
                       cpu: set[str] | None = None) -> None:
    """One line (exit 2) for a variant the device's vLLM cannot serve, before any server starts. ``cpu``: this
    machine's feature flags (default ``/proc/cpuinfo``'s; vLLM's servers run here)."""
    from evalsuite.cpu.onednn import cpu_flags

    if device != "cpu":
        return
    cpu = cpu_flags() if cpu is None else cpu
    for spec in specs:
        bad = [q for q in flag_values(spec.flags, "--quantization") if q.lower() in NO_CPU_QUANTIZATION]
        if bad:
            raise EvalsuiteError(f"variant {spec.name!r} needs --quantization {bad[0]}, which vLLM {version} on "
                                 f"this CPU cannot run (its FP8 weight kernels are GPU-only); serve an FP8 "
                                 f"checkpoint on a GPU, or a compressed-tensors INT8/INT4 one with ckpt:")
        fp8 = [d for d in flag_values(spec.flags, "--kv-cache-dtype") if d.lower().startswith("fp8")]
        if fp8 and not fp8_kv_runs(cpu):
            raise EvalsuiteError(f"variant {spec.name!r} needs --kv-cache-dtype {fp8[0]}, which vLLM {version} "
                                 f"runs on a CPU only with AVX-512 (avx512f/bw/vl/dq) or AMX, and this one has "
                                 f"neither; gate it on such a CPU or a GPU, or gate evalsuite's own kvf8e4 "
                                 f"in-process")


@dataclass
class VllmBackend:
    """Backend over vLLM servers it owns: one for the baseline, one per variant (``load`` starts them all, sized by
    ``backends.served.vllm.memory`` for the tasks ``fit_tasks`` was given)."""

    model: str  # evalsuite's --model (``default`` = the embedded model's converted folder)
    workdir: Path
    seed: int = 1234
    python: str | None = None  # --vllm-python (else $EVALSUITE_VLLM_PYTHON, this Python, ./.venv-vllm)
    concurrency: int = 4
    kld_enabled: bool = True
    startup_timeout_s: float = 900.0
    kld_method: str = skld.METHOD_TEXT
    options: EngineOptions = field(default_factory=EngineOptions)  # --tensor-parallel-size, --vllm-arg
    log: Callable[[str], None] = lambda _: None
    #: servers started by the caller (name -> VllmServer, e.g. a test session's): used, never stopped here
    external: dict[str, VllmServer] = field(default_factory=dict)
    _specs: list[ServedVariant] = field(default_factory=list)
    _pool: ServerPool | None = None
    _clients: dict[str, EndpointClient] = field(default_factory=dict)
    _local: Any = None  # a tokenizer-only InProcessBackend (prompts, token counts)
    _version: str = ""
    _device: str = ""
    _longest: list[tuple[str, int, int]] = field(default_factory=list)  # (task, longest prompt, max_new_tokens)
    _rendered: dict[str, list[tuple[str, bool]]] = field(default_factory=dict)

    def variants(self, requested: Sequence[Any]) -> list[ServedVariant]:
        """Parse every spec (what vLLM cannot serve is refused here) and find vLLM; nothing starts yet."""
        from evalsuite.models.loader import ModelFactory, resolve_source
        from evalsuite.backends.inprocess.inprocess import InProcessBackend

        base = Path(resolve_source(self.model))
        if not (base / "config.json").is_file():
            raise EvalsuiteError(f"--engine vllm serves a model folder; {self.model!r} is not one")
        self._specs = served_variants(requested, str(base))
        self.python = vllm_python(self.python)
        if not self._version:
            self._version, self._device = vllm_version(self.python)
        refuse_unsupported(self._specs, self._device, self._version)
        self._local = InProcessBackend(loader=ModelFactory(str(base), "auto", "cpu"), seed=self.seed)
        return self._specs

    @property
    def tokenizer(self) -> Any:
        return self._local.tokenizer_only()

    def fit_tasks(self, tasks: Sequence[PreparedTask]) -> None:
        """Size the servers for these tasks (called before ``load``): each task's longest prompt in the baseline's
        tokens plus its ``max_new_tokens``; a task longer than a server's model supports is one line (exit 2),
        before any server starts."""
        tok = self.tokenizer
        self._longest = []
        for task in tasks:
            counts = [len(tok(text, add_special_tokens=special)["input_ids"]) for text, special in self._prompts(task)]
            self._longest.append((task.name, max(counts, default=0), int(task.gen.max_new_tokens)))
        check_windows(self._longest, [server_need(s) for s in self._specs])

    def memory_plan(self) -> MemoryPlan:
        """Every server's context and GPU share (``backends.served.vllm.memory``) on the devices vLLM's Python sees."""
        needs = [server_need(s) for s in self._specs]
        given = self.options.value("--max-model-len")
        windows = [n.window for n in needs if n.window]
        context = context_needed(self._longest) if self._longest else min(windows or [4096])
        if given is not None:
            longest = max(self._longest, key=lambda t: t[1] + t[2], default=("", 0, 0))
            if not given.isdigit() or int(given) < longest[1] + longest[2]:
                raise EvalsuiteError(f"--vllm-arg --max-model-len {given}: task {longest[0]!r} needs "
                                     f"{longest[1] + longest[2]} tokens (prompt + answer)")
            context = int(given)
        devices = None
        if self._device == "cuda":
            devices = [Device(free, total) for free, total in vllm_devices(self.python)] or None
        share = self.options.value("--gpu-memory-utilization")
        return plan_memory(needs, context, devices, self.options.tensor_parallel_size,
                           float(share) if share else None)

    def load(self) -> ModelIdentity:
        """Start every server (baseline first), check each tokenizer against the baseline's, key the run."""
        from evalsuite.variants.artifact import artifact_fingerprint

        if not self._specs:
            self.variants([])
        if not self._version:
            self._version, self._device = vllm_version(self.python)
        if self._pool is None:
            plan = self.memory_plan()
            self.log(plan.describe())
            self._pool = ServerPool(self.python, Path(self.workdir), plan, self.options, self.concurrency)
        todo = [s for s in self._specs if s.name not in self._clients]
        for spec, server in zip(todo, self._pool.start(todo, self.external, self.startup_timeout_s)):
            self._connect(spec, server)
        base = self._specs[0]
        fp = hashlib.sha256(f"vllm|{artifact_fingerprint(base.model)}".encode()).hexdigest()[:16]
        self._write_facts()
        return ModelIdentity(name=self.model, fingerprint="vllm:" + fp, dtype=str(self.settings()["compute_dtype"]),
                             source=base.model,
                             meta={"engine": "vllm", "vllm_version": self._version, "device": self._device})

    def _connect(self, spec: ServedVariant, server: VllmServer) -> None:
        """Probe a healthy server and check its tokenizer against the baseline's."""
        self._pool.use(spec.name)
        client = EndpointClient(EndpointSpec(server.url, spec.name))
        client.probe()
        check_served_pairing(self.tokenizer, client, spec.name)
        self._clients[spec.name] = client

    def _write_facts(self) -> None:
        """``<run>/served.json``: every server's command, flags, start-up time, sleep/wake count and log, and the
        engine options (a resumed run reuses them)."""
        path = Path(self.workdir) / "served.json"
        old = json.loads(path.read_text()) if path.exists() else {}
        servers = {**old.get("servers", {}), **{n: s.facts() for n, s in self._pool.servers.items()}}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**old, "engine": "vllm", "vllm_version": self._version, "device": self._device,
                                    "python": self.python, "options": self.options.to_dict(),
                                    "one_at_a_time": self._pool.plan.one_at_a_time, "servers": servers}, indent=1))

    def settings(self) -> dict[str, Any]:
        """Everything that changes outputs (``backends.served.vllm.identity``): engine, vLLM's version and its
        interpreter's libraries, device, what the baseline's server ran with (dtype, context, KV-cache dtype, tensor
        parallelism, every output-changing flag); and, for the run's record, each server's flags and KV scheme."""
        from evalsuite.backends.served.vllm.identity import baseline_settings

        base = self._specs[0] if self._specs else None
        server = self._pool.servers.get(base.name) if self._pool is not None and base is not None else None
        served = baseline_settings(base, server, self.options) if base is not None else {}
        return {"backend": "vllm", "vllm_version": self._version, "device": self._device,
                "vllm_libraries": vllm_libraries(self.python) if self.python else {}, **served,
                "vllm_args": list(self.options.args),
                "servers": {s.name: {"model": s.model, "flags": list(s.flags), "kv_scheme": s.kv_scheme}
                            for s in self._specs}}

    def task_context(self) -> TaskContext:
        return self._local.task_context()

    def _raw_samples(self, task: PreparedTask, indices: Sequence[int]) -> tuple[list[Any], list[str]]:
        prompts = self._prompts(task)
        raw = [dataclasses.replace(task.samples[i], messages=None, prompt=prompts[i][0]) for i in indices]
        return raw, [prompts[i][0] for i in indices]

    def _prompts(self, task: PreparedTask) -> list[tuple[str, bool]]:
        """Every sample of ``task`` rendered by the baseline's tokenizer (cached per task)."""
        from evalsuite.run.prompts import render_prompt

        cached = self._rendered.get(task.name)
        if cached is None or len(cached) != len(task.samples):
            cached = self._rendered[task.name] = [render_prompt(s, self.tokenizer) for s in task.samples]
        return cached

    def generate(self, variant: ServedVariant, name: str, task: PreparedTask, indices: Sequence[int],
                 batch_size: int) -> Iterator[list[SampleResult]]:
        raw, texts = self._raw_samples(task, indices)
        self._pool.use(variant.name)
        pool = EndpointPool(self._clients[variant.name], self.concurrency, 0)
        yield from generate_logged(pool, LogprobLog(self.workdir), self.seed, name, task, indices, raw, texts)

    def kld(self, variant: ServedVariant, name: str, task: PreparedTask, indices: Sequence[int],
            answers: Sequence[str], batch_size: int) -> Iterator[list[KLDResult]]:
        """Both servers teacher-forced on the baseline's answer ids, one batch at a time: every request of the
        batch on one server, then on the other (the awake one first: servers that run one at a time switch twice
        per batch, not per sample); the method is stored per row."""
        if not self.kld_enabled:
            return
        prompts, tok = self._prompts(task), self.tokenizer
        sides = (self._specs[0].name, variant.name)
        for start in range(0, len(indices), batch_size):
            rows = []
            for j in range(start, min(start + batch_size, len(indices))):
                text, special = prompts[indices[j]]
                p_ids = tok(text, add_special_tokens=special)["input_ids"]
                a_ids = tok(answers[j] or tok.eos_token, add_special_tokens=False)["input_ids"]
                rows.append((p_ids + a_ids, a_ids, *skld.method_for(len(p_ids) + len(a_ids), len(tok))))
            got = {side: self._answer_logprobs(side, rows, name)
                   for side in sorted(sides, key=lambda n: self._pool.servers[n].asleep)}
            out = []
            for r, (_, a_ids, method, _) in enumerate(rows):
                kls, agree, n = skld.answer_kld(got[sides[0]][r], got[sides[1]][r], a_ids, method == skld.FULL)
                out.append(KLDResult(name, task.name, task.samples[indices[start + r]].id, tuple(kls), agree, n,
                                     method))
            yield out

    def _answer_logprobs(self, side: str, rows: list[tuple[list[int], list[int], str, int]], name: str
                         ) -> list[list[skld.Position | None]]:
        """One server's prompt log-probs for every (ids, answer ids, method, k) row, kept at the answer positions."""
        client = self._clients[side]
        self._pool.use(side)

        def one(row: tuple[list[int], list[int], str, int]) -> list[skld.Position | None]:
            ids, a_ids, _, k = row
            return skld.prompt_logprobs(client, ids, k)[-len(a_ids):]

        with ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"vkld-{name}") as ex:
            return list(ex.map(one, rows))

    def same_as_baseline(self, variant: ServedVariant) -> bool:
        """Same model folder and no extra flags: the same server configuration as the baseline."""
        base = self._specs[0]
        return variant.model == base.model and tuple(variant.flags) == tuple(base.flags)

    def verifies(self, variant: ServedVariant) -> str:
        return ("served variants generate every answer (vLLM's API cannot check a greedy answer against given "
                "ids without decoding it)")

    def verify(self, *args: Any, **kwargs: Any) -> Iterator[list[Any]]:
        raise NotImplementedError("served variants are not verified (see verifies)")

    def info(self, variant: ServedVariant, name: str) -> VariantInfo:
        exact, formula = served_weight_bytes(variant)
        kv = kv_bytes_per_token(variant)
        server = self._pool.servers.get(variant.name) if self._pool else None
        return VariantInfo(variant=name, spec=variant.to_dict(), weight_bytes=exact, weight_formula_bytes=formula,
                           kv_bytes_per_token=kv, kv_formula_bytes_per_token=kv, source=variant.model,
                           kernels=f"vllm {self._version}" + (f" ({server.url})" if server else ""))

    def release(self, variant: ServedVariant) -> None:
        """Stop a variant's server when the Runner is done with it (the baseline's serves every KLD pass)."""
        if not variant.is_baseline and self._pool is not None and variant.name in self._pool.servers:
            self._write_facts()  # its sleep/wake count, before it goes
            self._clients.pop(variant.name, None)
            self._pool.stop(variant.name)

    def close(self) -> None:
        """Stop every server this backend started."""
        if self._pool is not None:
            if self._pool.servers:
                self._write_facts()
            self._pool.close()
        self._clients.clear()
