"""What the Runner needs from whatever produces answers: the ``Backend`` protocol.

A backend turns (variant, task, sample indices) into scored samples, gives teacher-forced (or approximate) KLD of a
variant against the baseline's stored answers, and describes each variant (bytes; the Runner adds the timing
medians from the stored samples). Four implementations:

* ``evalsuite.backends.inprocess.inprocess.InProcessBackend``: a model loaded in this process, variants built from it;
* ``evalsuite.backends.served.endpoint_backend.EndpointBackend``: OpenAI-compatible servers (vLLM, llama.cpp, ...);
* ``evalsuite.backends.served.mixed.MixedBackend``: an in-process baseline beside served variants;
* ``evalsuite.backends.ray.ray_backend.RayBackend``: the in-process backend fanned out over Ray workers.

The Runner (``evalsuite.run.runner``) owns everything else once, for all four: which samples are still to do,
storing as results arrive, resume, timing medians, the noise floor. Backends are chosen above ``run`` (in the
CLI), so ``run`` never imports ``scale``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

from evalsuite.run.prepare import PreparedTask
from evalsuite.store.records import KLDResult, Reference, SampleResult, VariantInfo
from evalsuite.tasks.base import TaskContext


@dataclass(frozen=True)
class ModelIdentity:
    """The baseline a run is keyed by: its content fingerprint (never the name alone) and how it was loaded."""

    name: str
    fingerprint: str
    dtype: str
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class VariantRef(Protocol):
    """A variant as the Runner sees it (a VariantSpec, an EndpointSpec ...)."""

    @property
    def name(self) -> str: ...

    @property
    def is_baseline(self) -> bool: ...

    def to_dict(self) -> dict[str, Any]: ...


@runtime_checkable
class Backend(Protocol):
    """Generation, KLD and variant facts for the Runner. ``variants`` parses without loading anything.

    Optional: ``fit_tasks(tasks)``, called with the prepared tasks before ``load`` (the vLLM engine sizes its
    servers' context and memory to the longest prompt, ``backends.served.vllm.memory``)."""

    kld_method: str  # how ``kld`` measures: stored in the run so the report can say it

    def variants(self, requested: Sequence[Any]) -> list[VariantRef]:
        """The baseline first, then the requested variants; bad input raises before anything loads."""

    def load(self) -> ModelIdentity:
        """Load the model / probe the servers (idempotent); the identity keys the run and its baselines."""

    def settings(self) -> dict[str, Any]:
        """Everything beside the identity that changes outputs (dtype, batch size ...), for baseline manifests."""

    def task_context(self) -> TaskContext:
        """What tasks may know about the model (its token counter and window) before making samples."""

    def generate(self, variant: VariantRef, name: str, task: PreparedTask, indices: Sequence[int],
                 batch_size: int) -> Iterator[list[SampleResult]]:
        """Scored samples (via ``evalsuite.run.scoring.score_sample``) for ``indices``, a group at a time, as
        they complete; ``name`` is what they are stored as (the variant's name, or the noise floor's)."""

    def kld(self, variant: VariantRef, name: str, task: PreparedTask, indices: Sequence[int],
            answers: Sequence[str], batch_size: int) -> Iterator[list[KLDResult]]:
        """KLD of ``variant`` from the baseline over the baseline's ``answers`` to ``indices``, a group at a time."""

    def same_as_baseline(self, variant: VariantRef) -> bool:
        """Whether ``variant`` provably computes what the baseline computes (``variants.identical``): the Runner
        then copies the baseline's answers and stores KLD 0 instead of asking for them. False when unknown."""

    def verifies(self, variant: VariantRef) -> str:
        """"" when ``verify`` can check ``variant``'s greedy answers against the baseline's (``run.verify``), else
        why its answers are generated instead (the Runner logs it once)."""

    def verify(self, variant: VariantRef, name: str, task: PreparedTask, indices: Sequence[int],
               refs: Sequence[Reference], outputs: Sequence[str], batch_size: int) -> Iterator[list[Any]]:
        """(SampleResult, KLDResult, outcome) per sample, a batch at a time: ``variant``'s answers checked against
        the baseline's ids ``refs`` (texts ``outputs``), decoded only after a divergence. Only called when
        ``verifies`` says "" ."""

    def info(self, variant: VariantRef, name: str) -> VariantInfo:
        """Bytes of the variant (timings are filled in by the Runner from the stored samples)."""

    def release(self, variant: VariantRef) -> None:
        """Free what was built for ``variant`` (called when the Runner is done with it)."""

    def close(self) -> None:
        """Free everything (a Ray instance this backend started is shut down)."""
