"""Plain records that flow from the runner into the store, statistics, gate and report."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    import numpy as np

#: a baseline rerun at another batch size is stored as "<baseline>@noise" (the noise floor)
NOISE_SUFFIX = "@noise"
#: how the decoder stores a greedy answer (token ids + stop reason) and flushes quantized KV caches (per row);
#: stored baselines and resumed runs are keyed by it, so rows of another decoder format are never mixed in
DECODE_FORMAT = "ids-v1+rowflush-v1"
#: a sample scoring at least this is right (binary tasks' flips and McNemar, the report's flipped samples)
RIGHT_AT = 0.5


@overload
def is_right(score: float) -> bool: ...
@overload
def is_right(score: np.ndarray) -> np.ndarray: ...
def is_right(score: float | np.ndarray) -> bool | np.ndarray:
    """Whether ``score`` counts as right (elementwise for a numpy array of scores)."""
    return score >= RIGHT_AT


@dataclass(frozen=True)
class SampleResult:
    """One scored sample of one variant (what the store holds, one row each)."""

    variant: str
    task: str
    task_version: str
    sample_id: str
    prompt_hash: str
    output: str
    score: float
    extracted: str | None = None
    reason: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)  # slices, e.g. context_len, depth
    prompt: str = ""  # the rendered prompt text (for the flipped-sample browser)
    n_tokens: int = 0
    ttft_s: float | None = None
    itl_s: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # the task's secondary metrics (Score.metrics)
    outputs: tuple[str, ...] = ()  # all n generations when the task asks for n > 1 (pass@k); else empty
    token_ids: tuple[int, ...] = ()  # the generated ids of a greedy single generation (what verification needs)
    stop: str = ""  # why it ended: "eos", "stop" (a stop string), "rule" (a stop rule), "length"; "" = not recorded
    #: how the answer was obtained: "generated" (decoded in full), "verified" (the baseline's answer, every token
    #: confirmed by the variant's own greedy choice), "diverged@t" (the baseline's first t tokens confirmed, the
    #: rest decoded), "regenerated" (verification not possible: decoded in full); "" = stored before verification
    decode: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Reference:
    """The baseline's greedy answer to one prompt, as verification reads it: its generated ids (stop token
    excluded) and why it ended."""

    ids: tuple[int, ...]
    stop: str  # "eos" | "stop" | "rule" | "length" (after a stop string or rule nothing more is checked)

    @property
    def fed(self) -> int:
        """Answer tokens a verification pass feeds: all of them when the stop token after them is checked too."""
        return len(self.ids) if self.stop == "eos" else max(len(self.ids) - 1, 0)


@dataclass(frozen=True)
class KLDResult:
    """Teacher-forced fidelity of one sample: variant vs baseline over the baseline's answer tokens."""

    variant: str
    task: str
    sample_id: str
    token_kld: tuple[float, ...]  # KL(baseline || variant) per answer token
    top1_agree: int  # answer tokens where argmax matches
    n_tokens: int
    method: str = ""  # how this row was measured (a short code); "" = the run's ``kld_method``

    @property
    def mean(self) -> float:
        return sum(self.token_kld) / len(self.token_kld) if self.token_kld else 0.0


@dataclass(frozen=True)
class VariantInfo:
    """Memory and speed of one variant, measured during the run."""

    variant: str
    spec: dict[str, Any]
    weight_bytes: int
    weight_formula_bytes: int
    kv_bytes_per_token: float | None = None
    kv_formula_bytes_per_token: float | None = None
    ttft_s: float | None = None  # median time to first token
    itl_s: float | None = None  # median inter-token latency
    fingerprint: str | None = None  # artifact variants: a hash of the artifact's bytes
    source: str | None = None  # artifact variants: the folder / file gated
    kernels: str | None = None  # how quantized weights executed in the run: "quanto" or "dequantized" (build.KERNELS)
    speed_probe: dict[str, int] | None = None  # TTFT / ITL from a fixed probe of this shape (None: from the samples)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
