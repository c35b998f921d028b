"""What a run is asked to do (stored in the run's store so ``--resume`` can continue it exactly)."""
from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

from evalsuite.errors import EvalsuiteError

BASELINE = "bf16"
#: The 2x2 grid {BF16, int4 weights} x {BF16, int4 KV cache}.
DEFAULT_VARIANTS = ("bf16", "w4g64", "kv4g32", "w4g64+kv4g32")
#: Cheapest first (baseline per sample on the embedded model, fp32, batch 32: reasoning ~0.4 s, code ~1.3-1.8,
#: json ~1.5-2.3, needle ~4.6):
#: a sequential run under a budget goes task by task, so the cheap tasks decide (or FAIL a variant) first.
DEFAULT_TASKS = ("reasoning", "code", "json", "needle")
#: what ``--resume`` (and an ``--accumulate`` continuation) may change in a stored config; everything else is the
#: run's. A new task-config folder is compared by the values it gives (``run.identity``), the device is checked
#: where it is resolved (``cli.common.check_device``), the budget and the cap by ``validate``
RESUMABLE = ("device", "budget_s", "max_samples", "task_config")


@dataclass
class RunConfig:
    """A run: one model, the baseline plus variants, tasks with parameters, a seed."""

    model: str = "default"
    dtype: str = "auto"  # bf16 weights computed in the faster of bf16 / fp32 here (evalsuite.models.dtype)
    device: str = "auto"  # auto | cpu | cuda | cuda:N (evalsuite.models.device); stored configs without it: cpu
    variants: list[str] = field(default_factory=lambda: list(DEFAULT_VARIANTS))
    tasks: list[str] = field(default_factory=lambda: list(DEFAULT_TASKS))
    task_params: dict[str, dict[str, Any]] = field(default_factory=dict)  # --param (they win over task files)
    #: the folder of task parameter files named by ``--task-config`` (absolute); None: ``$EVALSUITE_TASK_CONFIG``,
    #: else ``./tasks`` where the command runs (``evalsuite.paths.task_config_dir``)
    task_config: str | None = None
    seed: int = 1234
    limit: int | None = None
    #: sequential rounds (with ``budget_s``, or this alone): a safety cap of samples per task (None with a budget:
    #: each stream's size, or 1000); after each round the gate decides which (variant, task) still need more
    max_samples: int | None = None
    round_size: int = 16
    budget_s: float | None = None  # wall-clock budget of a sequential run (no new round once spent)
    batch_size: int = 16
    max_batch_tokens: int = 24576
    kld: bool = True
    noise_floor: bool = False
    #: weight-only variants: "dequantized" (quanto's quantized values unpacked once: the quality run, ~2x faster
    #: decode on CPU) or "quanto" (its packed modules and kernels, as deployed: for speed figures)
    weight_kernels: str = "dequantized"
    #: KV-cache-only variants start from the baseline's prompt K/V (faster on long prompts; answers then depend on
    #: the baseline's batching, so off by default: evalsuite.backends.inprocess.snapshots)
    reuse_prompt_kv: bool = False
    #: a variant that computes exactly what the baseline computes (bit-identical weights and an unquantized cache,
    #: e.g. w4g32 of a Q4_1 model) takes the baseline's answers instead of generating them again
    reuse_identical: bool = True
    #: greedy variants are verified against the baseline's answer ids and decode only after a divergence
    #: (run.verify); off: every variant generates every answer
    verify: bool = True
    #: verify weight-only variants in bf16 compute on kernels that are not batch-invariant too (``--verify on``);
    #: by default (``auto``) they regenerate there: the bf16 near-tie margin sends most rows to a decode, and
    #: regenerating (refill pool, KLD from their own prompt K/V) costs less than a pass plus tails. On batch-invariant
    #: kernels (``models.invariance``) every greedy variant is verified (docs/verification.md)
    verify_bf16: bool = False
    #: the fraction of verified samples regenerated in full to check the verification (seeded per sample)
    verify_audit: float = 0.0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse settings that exclude each other (one line, exit 2): a fixed set (``limit``) or sequential
        rounds (``max_samples`` / ``budget_s``)."""
        if self.limit is not None and self.max_samples is not None:
            raise EvalsuiteError("--limit (a fixed set) and --max-samples (sequential rounds) exclude each other")
        if self.limit is not None and self.budget_s is not None:
            raise EvalsuiteError("--limit (a fixed set) and --budget (sequential rounds) exclude each other")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def resumed_with(self, **changes: Any) -> "RunConfig":
        """This config with what a resume may change (``RESUMABLE``), validated again (``--resume RUN --budget``
        on a ``--limit`` run is refused like the two options together)."""
        bad = sorted(set(changes) - set(RESUMABLE))
        if bad:
            raise TypeError(f"a resume cannot change {', '.join(bad)}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        """A stored config; one stored before ``device`` existed ran on the CPU, so it resumes there. Keys this
        version no longer has (``baselines_dir``, never read) are ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{"device": "cpu", **{k: v for k, v in d.items() if k in known}})
