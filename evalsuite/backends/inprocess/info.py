"""What a built variant costs, measured: weight bytes and KV bytes per token beside their formulas, TTFT and ITL."""
from __future__ import annotations

from evalsuite.store.records import VariantInfo
from evalsuite.backends.inprocess.kvbytes import measure_kv_bytes_per_token
from evalsuite.backends.inprocess.speed import SpeedProbe
from evalsuite.variants.build import BuiltVariant


def variant_info(built: BuiltVariant, name: str, probe: SpeedProbe) -> VariantInfo:
    """``built``'s costs under the run's name ``name``; the speed probe runs its fixed prompts on it."""
    from evalsuite.kvcache import kv_bytes_per_token

    spec = built.spec
    ttft, itl = probe.measure(built.model, built.tokenizer, built.make_cache)
    return VariantInfo(variant=name, spec=spec.to_dict(), weight_bytes=built.weights.measured,
                       ttft_s=ttft, itl_s=itl, speed_probe=probe.to_dict(),
                       weight_formula_bytes=built.weights.formula,
                       kv_bytes_per_token=measure_kv_bytes_per_token(built),
                       kv_formula_bytes_per_token=kv_bytes_per_token(spec.kv, built.model.config, built.float_bytes),
                       fingerprint=built.fingerprint, source=built.source,
                       kernels=built.kernels if spec.weights.fmt != "none" else None)
