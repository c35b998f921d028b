"""How evalsuite's vLLM servers share the GPUs (pure arithmetic, no torch): each server's ``--max-model-len`` and
``--gpu-memory-utilization``, and whether they run side by side or one at a time.

**Context.** Every server gets ``--max-model-len`` = the tasks' longest prompt plus its ``max_new_tokens``
(``context_needed``), rounded up to a whole ``BLOCK``, capped by the model's window; a task that needs more than a
server's model supports is one line (exit 2) before any server starts.

**Memory.** vLLM's ``--gpu-memory-utilization`` is the fraction of each GPU's *total* memory a server may take (its
weights, activations and KV cache together); a server refuses to start when less than that is free. Per GPU (a
tensor-parallel server spreads weights and KV cache over ``tp`` GPUs), a server needs at least

    weights / tp + KV bytes per token x max-model-len / tp + OVERHEAD_BYTES + logits workspace,

the KV part for one sequence at the longest context (vLLM refuses to start below that), the logits workspace for a
prefill chunk's prompt log-probs (``PREFILL_CHUNK`` tokens x vocabulary x ``LOGITS_BYTES``; evalsuite's KLD asks for
prompt log-probs, which vLLM computes for a whole chunk at once). When every server's need fits in ``SHARE_CAP`` of
the GPU (less what other processes hold), they run side by side, each with its need plus an equal part of what is
left (more KV cache: more requests in flight). Otherwise they run **one at a time** in vLLM's sleep mode: every
server starts (one after another), then sleeps; the one in use is woken and gets the whole budget but what a
sleeping server keeps (``SLEEP_RESIDUE_BYTES`` each). A server that does not fit even alone is one line (exit 2).

Why sleep mode and not stop-and-start: a gate switches between servers several times per round (each variant's
answers, then the KLD pass reads the baseline's and the variant's log-probs). A level-1 sleep keeps the process,
its compiled kernels and CUDA graphs, and copies the weights to host memory; waking copies them back (host RAM must
hold every sleeping server's weights). A restart would repeat the whole start-up (load, profile, compile, capture:
tens of seconds to minutes) at every switch. The figures here are vLLM's documented behaviour and estimates:
``OVERHEAD_BYTES`` and ``SLEEP_RESIDUE_BYTES`` have not been measured on a GPU by evalsuite (docs/vllm.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from evalsuite.errors import EvalsuiteError
from evalsuite.capacity.capacity import fmt_bytes
from evalsuite.backends.served.vllm.sizes import ServerNeed

GIB = 1 << 30
SHARE_CAP = 0.92  #: the most all servers may take of a GPU together
OVERHEAD_BYTES = 2 * GIB  #: per server and GPU: CUDA context, CUDA graphs, activations, non-torch allocations
PREFILL_CHUNK = 2048  #: --max-num-batched-tokens evalsuite gives GPU servers (bounds the logits workspace)
LOGITS_BYTES = 10  #: per (token, vocabulary entry) of a prompt log-probs chunk: bf16 logits + fp32 + log-softmax
SLEEP_RESIDUE_BYTES = 1 * GIB  #: what a sleeping server keeps on each GPU (CUDA context, allocator pools)
BLOCK = 256  #: --max-model-len is rounded up to a multiple of this


@dataclass(frozen=True)
class Device:
    """One GPU as vLLM's Python sees it: free and total bytes."""

    free: int
    total: int


@dataclass(frozen=True)
class Placement:
    """One server's sizing: its context, its share of each GPU (None on the CPU) and what it needs per GPU (on
    the CPU: its KV cache at ``max_model_len``)."""

    name: str
    max_model_len: int
    share: float | None
    need_bytes: int


@dataclass(frozen=True)
class MemoryPlan:
    """Every server's sizing and whether they run one at a time (vLLM's sleep mode)."""

    servers: tuple[Placement, ...]
    one_at_a_time: bool
    tp: int = 1
    gpu_bytes: int | None = None

    def placement(self, name: str) -> Placement:
        return next(p for p in self.servers if p.name == name)

    def describe(self) -> str:
        """One line for the run's log."""
        where = (f"{self.tp} x {fmt_bytes(self.gpu_bytes)} GPU" if self.gpu_bytes else "CPU")
        mode = "one at a time (sleep mode)" if self.one_at_a_time else "side by side"
        head = f"vLLM servers on {where}, {mode}: max-model-len {max(p.max_model_len for p in self.servers)}"
        if self.gpu_bytes is None:
            return f"{head}; servers {', '.join(p.name for p in self.servers)}"
        return f"{head}; shares {', '.join(f'{p.name} {p.share:.3f}' for p in self.servers)}"


def context_needed(longest: Sequence[tuple[str, int, int]]) -> int:
    """The context every server must hold: max over tasks of (longest prompt tokens + max_new_tokens), rounded up
    to a whole ``BLOCK``. ``longest``: (task, longest prompt, max_new_tokens) per task."""
    need = max((prompt + new for _, prompt, new in longest), default=BLOCK)
    return -(-need // BLOCK) * BLOCK


def check_windows(longest: Sequence[tuple[str, int, int]], needs: Sequence[ServerNeed]) -> None:
    """One line (exit 2) for a task whose longest prompt plus answer is more than a server's model supports."""
    for task, prompt, new in longest:
        for need in needs:
            if need.window is not None and prompt + new > need.window:
                raise EvalsuiteError(f"task {task!r} needs {prompt} prompt + {new} answer tokens, more than "
                                     f"{need.name!r}'s {need.window}-token window: shorten its prompts (e.g. "
                                     f"--param needle.context_lens=...) or serve a longer-context model")


def _per_gpu(need: ServerNeed, context: int, tp: int) -> int:
    """Bytes one server needs on each of its ``tp`` GPUs at ``context`` tokens (one sequence)."""
    logits = min(PREFILL_CHUNK, context) * need.vocab * LOGITS_BYTES
    return math.ceil((need.weight_bytes + need.kv_bytes_per_token * context) / tp) + OVERHEAD_BYTES + logits


def plan_memory(needs: Sequence[ServerNeed], context: int, devices: Sequence[Device] | None, tp: int = 1,
                share: float | None = None, cap: float = SHARE_CAP) -> MemoryPlan:
    """Size every server for ``context`` tokens on ``devices`` (None: the CPU, no shares). ``share``: the user's own
    ``--gpu-memory-utilization`` for every server (then only checked). Shares are whole thousandths, rounded so
    that each covers its need and together they stay within the budget. One line (exit 2) when a server cannot
    fit."""
    lens = {n.name: min(context, n.window) if n.window else context for n in needs}
    kv = {n.name: math.ceil(n.kv_bytes_per_token * lens[n.name] / tp) for n in needs}
    if not devices:
        return MemoryPlan(tuple(Placement(n.name, lens[n.name], None, kv[n.name]) for n in needs), False, tp)
    if tp > len(devices):
        raise EvalsuiteError(f"--tensor-parallel-size {tp} needs {tp} GPUs; vLLM sees {len(devices)}")
    total = min(d.total for d in devices[:tp])
    budget = min(cap * total, min(d.free for d in devices[:tp]) - (1 - cap) * total)  # others' memory counts
    per = {n.name: _per_gpu(n, lens[n.name], tp) for n in needs}
    need_m = {k: math.ceil(v / total * 1000) for k, v in per.items()}
    budget_m = math.floor(budget / total * 1000)
    if share is not None:
        together = share * len(needs) <= cap
        share_m = {k: round(share * 1000) for k in per}
    elif sum(need_m.values()) <= budget_m:
        together, extra = True, (budget_m - sum(need_m.values())) // len(needs)
        share_m = {k: v + extra for k, v in need_m.items()}
    else:
        alone = math.floor((budget - (len(needs) - 1) * SLEEP_RESIDUE_BYTES) / total * 1000)
        together, share_m = False, {k: alone for k in per}
    for name, need in per.items():
        if need_m[name] > share_m[name]:
            raise EvalsuiteError(f"vLLM server {name!r} needs {fmt_bytes(need)} per GPU at --max-model-len "
                                 f"{lens[name]} (weights, KV cache, overhead), more than its "
                                 f"{share_m[name] / 1000:.3f} of {fmt_bytes(total)}: use more GPUs "
                                 f"(--tensor-parallel-size), an FP8 KV cache, or shorter prompts")
    return MemoryPlan(tuple(Placement(n.name, lens[n.name], share_m[n.name] / 1000, per[n.name]) for n in needs),
                      not together, tp, total)
