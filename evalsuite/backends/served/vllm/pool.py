"""A run's vLLM servers: their engine flags (``backends.served.vllm.memory``'s sizing, tensor parallelism, the user's
``--vllm-arg``s), the order they start in, and which one is awake when they run one at a time.

Start order: on a GPU one after another, each healthy before the next spawns (vLLM sizes its KV cache by profiling
the GPU's free memory, and assumes no other process changes it meanwhile); side by side on the CPU (each has its own
``VLLM_CPU_KVCACHE_SPACE``). One at a time (sleep mode): each server sleeps once healthy, and ``use`` wakes the one
asked for after putting the others to sleep.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from evalsuite.errors import EvalsuiteError
from evalsuite.backends.served.vllm.memory import GIB, PREFILL_CHUNK, MemoryPlan, Placement
from evalsuite.backends.served.vllm.server import KV_SPACE_GIB, VllmServer
from evalsuite.backends.served.vllm.specs import ServedVariant, flag_values

#: engine flags evalsuite sets itself, refused in --vllm-arg (a variant's own flags go in its spec)
OWN_FLAGS = ("--model", "--host", "--port", "--served-model-name")


@dataclass(frozen=True)
class EngineOptions:
    """What the command line adds to every server: ``--tensor-parallel-size`` and raw ``--vllm-arg``s."""

    tensor_parallel_size: int = 1
    args: tuple[str, ...] = ()

    @classmethod
    def parse(cls, tensor_parallel_size: int | None, vllm_args: Sequence[str]) -> "EngineOptions":
        """Each ``--vllm-arg`` value split as a shell would (``"--max-num-seqs 64"``); evalsuite's own flags are one
        line (exit 2)."""
        args = tuple(a for value in vllm_args for a in shlex.split(value))
        bad = sorted({a.split("=", 1)[0] for a in args} & set(OWN_FLAGS))
        if bad:
            raise EvalsuiteError(f"--vllm-arg {bad[0]}: evalsuite sets it for each server")
        given = flag_values(args, "--tensor-parallel-size")  # the option's value wins over a raw one
        tp = tensor_parallel_size or (int(given[-1]) if given and given[-1].isdigit() else 1)
        if tp < 1:
            raise EvalsuiteError(f"--tensor-parallel-size must be >= 1, got {tp}")
        return cls(tp, drop_flag(args, "--tensor-parallel-size"))

    def value(self, flag: str) -> str | None:
        """The last value the user gave ``flag`` in ``--vllm-arg`` (None: not given)."""
        found = flag_values(self.args, flag)
        return found[-1] if found else None

    def to_dict(self) -> dict[str, Any]:
        return {"tensor_parallel_size": self.tensor_parallel_size, "args": list(self.args)}


def drop_flag(args: Sequence[str], flag: str) -> tuple[str, ...]:
    """``args`` without ``flag`` and its value (``--flag V`` or ``--flag=V``)."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        elif not a.startswith(flag + "="):
            out.append(a)
    return tuple(out)


def sizing_flags(place: Placement, plan: MemoryPlan, options: EngineOptions) -> tuple[str, ...]:
    """One server's engine flags: its context and share (unless the user set them), parallelism, sleep mode, then
    the user's ``--vllm-arg``s."""
    out: list[str] = []
    if options.value("--max-model-len") is None:
        out += ["--max-model-len", str(place.max_model_len)]
    if place.share is not None:
        if options.value("--gpu-memory-utilization") is None:
            out += ["--gpu-memory-utilization", f"{place.share:.3f}"]
        if options.value("--max-num-batched-tokens") is None:
            out += ["--max-num-batched-tokens", str(PREFILL_CHUNK)]
    if plan.tp > 1:
        out += ["--tensor-parallel-size", str(plan.tp)]
    if plan.one_at_a_time:
        out.append("--enable-sleep-mode")
    return (*out, *options.args)


def cpu_kv_space(place: Placement, concurrency: int) -> str:
    """``VLLM_CPU_KVCACHE_SPACE`` (GiB) of a CPU server: room for ``concurrency`` sequences at its context, at least
    ``KV_SPACE_GIB``."""
    return str(max(KV_SPACE_GIB, math.ceil(place.need_bytes * concurrency / GIB)))


@dataclass
class ServerPool:
    """The servers of one run: built from the specs and the plan, started, switched, stopped."""

    python: str
    workdir: Path
    plan: MemoryPlan
    options: EngineOptions = field(default_factory=EngineOptions)
    concurrency: int = 4
    servers: dict[str, VllmServer] = field(default_factory=dict)  # every server in use (owned or a caller's)
    owned: dict[str, VllmServer] = field(default_factory=dict)  # the ones started here (stopped here)

    def server(self, spec: ServedVariant) -> VllmServer:
        """The (not yet started) server of ``spec``."""
        place = self.plan.placement(spec.name)
        env = {} if place.share is not None else {"VLLM_CPU_KVCACHE_SPACE": cpu_kv_space(place, self.concurrency)}
        return VllmServer(self.python, spec.model, spec.flags, Path(self.workdir) / "servers" / f"{spec.name}.log",
                          name=spec.name, env=env, sizing=sizing_flags(place, self.plan, self.options))

    def start(self, specs: Sequence[ServedVariant], external: dict[str, VllmServer], timeout_s: float
              ) -> list[VllmServer]:
        """Start every spec's server (a caller's live one with the same model and flags is used instead), in the
        order the device needs; returns them in ``specs`` order."""
        chosen: list[VllmServer] = []
        for spec in specs:
            ext = external.get(spec.name)
            if ext is not None and ext.alive() and ext.model == spec.model and tuple(ext.flags) == spec.flags:
                chosen.append(ext)
            else:
                chosen.append(self.server(spec))
                self.owned[spec.name] = chosen[-1]
        new = [s for s in chosen if s.name in self.owned and s.proc is None]
        if self.plan.gpu_bytes is None:  # the CPU: side by side
            for s in new:
                s.spawn()
            for s in new:
                s.ready(timeout_s)
        else:  # a GPU: one after another
            for s in new:
                s.spawn().ready(timeout_s)
                if self.plan.one_at_a_time:
                    s.sleep()
        self.servers.update({s.name: s for s in chosen})
        return chosen

    def use(self, name: str) -> VllmServer:
        """The server of ``name``, awake: when servers run one at a time, every other one is put to sleep first."""
        server = self.servers[name]
        if self.plan.one_at_a_time:
            for other in self.servers.values():
                if other is not server and other.sleep_mode and not other.asleep:
                    other.sleep()
            if server.asleep:
                server.wake()
        return server

    def stop(self, name: str) -> None:
        """Forget ``name``'s server, stopping it when it was started here."""
        self.servers.pop(name, None)
        if name in self.owned:
            self.owned.pop(name).stop()

    def close(self) -> None:
        """Stop every server started here (all at once, then wait)."""
        for server in self.owned.values():
            server.terminate()
        for name in list(self.owned):
            self.owned.pop(name).stop()
        self.servers.clear()
