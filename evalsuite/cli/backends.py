"""Choosing the backend for a run (above ``run``: the run package never imports ``scale``)."""
from __future__ import annotations

from pathlib import Path

from evalsuite.errors import EvalsuiteError
from evalsuite.run.backend import Backend
from evalsuite.core.config import RunConfig
from evalsuite.variants.grammar import spec_kind


def make_backend(config: RunConfig, run_dir: Path, ray_address: str | None = None) -> Backend:
    """An endpoint backend for an ``openai:`` model, Ray fan-out with ``--ray``, else in-process (mixed with
    served variants when any variant is ``openai:``).

    Constructing a backend loads nothing: the model loads (or servers are probed) when the run starts."""
    from evalsuite.models.loader import ModelFactory

    if spec_kind(config.model) == "openai":
        from evalsuite.backends.served.endpoint_backend import EndpointBackend

        return EndpointBackend(config.model, workdir=run_dir, seed=config.seed, top_k=5 if config.kld else 0)
    factory = ModelFactory(config.model, config.dtype, config.device)
    served = any(isinstance(v, str) and spec_kind(v) == "openai" for v in config.variants)
    if ray_address is not None:
        if served:
            raise EvalsuiteError("served (openai:) variants run next to an in-process baseline, not with --ray")
        from evalsuite.backends.ray.ray_backend import RayBackend

        if config.weight_kernels != "dequantized":
            raise EvalsuiteError("--weight-kernels quanto is not available with --ray (workers run dequantized)")
        return RayBackend(factory, address=ray_address, seed=config.seed, max_batch_tokens=config.max_batch_tokens)
    from evalsuite.backends.inprocess.inprocess import InProcessBackend
    from evalsuite.backends.inprocess.snapshots import PROMPT_KV_BYTES

    local = InProcessBackend(loader=factory, seed=config.seed, max_batch_tokens=config.max_batch_tokens,
                             kernels=config.weight_kernels, snapshot_bytes=PROMPT_KV_BYTES if config.kld else 0,
                             reuse_base_prompts=config.reuse_prompt_kv, verify_bf16=config.verify_bf16,
                             stop_rules=not served)  # a served variant could not apply them: no side does
    if served:
        from evalsuite.backends.served.mixed import MixedBackend

        return MixedBackend(local, workdir=run_dir, seed=config.seed, top_k=5 if config.kld else 0)
    return local
