"""Build a runnable variant (model + KV-cache factory + measured bytes) from the loaded baseline."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from evalsuite.models.attention import NAME
from evalsuite.models.invariance import pad_small_batches
from evalsuite.models.loader import LoadedModel
from evalsuite.models.packed import pack_linears, packed_model
from evalsuite.variants.memory import WeightBytes, weight_bytes
from evalsuite.variants.spec import VariantSpec
from evalsuite.variants.weights import dequantize_linears, quantize_weights

#: How a weight-only variant's Linear layers execute: ``quanto`` keeps optimum-quanto's modules (packed weights,
#: its kernels: what deploys, for speed figures); ``dequantized`` multiplies by the same quantized values unpacked
#: once into the compute dtype (a quality run: identical weights, about half the decode step on CPU).
KERNELS = ("quanto", "dequantized")


@dataclass
class BuiltVariant:
    """A variant ready to generate: its model (shared with the baseline when weights are unquantized)."""

    spec: VariantSpec
    model: Any
    tokenizer: Any
    weights: WeightBytes
    fingerprint: str | None = None  # artifacts: a hash of the artifact's bytes
    source: str | None = None  # artifacts: the path loaded
    kernels: str = "quanto"  # how quantized Linear layers execute (``KERNELS``)
    #: computes exactly what the baseline computes (bit-identical weights, same modules, unquantized cache):
    #: its answers are the baseline's (``variants.identical``)
    same_as_base: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    def make_cache(self, keep_exact: bool = False) -> Any | None:
        """A fresh KV cache for one batch (None = transformers' default DynamicCache); ``keep_exact``: evalsuite's
        cache also keeps full-precision K/V (a verification pass)."""
        if self.spec.kv is None:
            return None
        from evalsuite.kvcache import make_cache

        return make_cache(self.spec.kv, self.model.config, keep_exact=keep_exact)

    @property
    def float_bytes(self) -> int:
        """Width of the floats this variant holds as deployed (its weights' dtype, even when computing wider)."""
        return self.weights.float_bytes or next(self.model.parameters()).element_size()

    @property
    def cache_factory(self) -> Callable[[], Any | None]:
        return self.make_cache

    def kv_bytes_per_token(self) -> float:
        """Formula bytes per token of this variant's KV cache (unquantized cache at the weights' dtype if none)."""
        from evalsuite.kvcache import kv_bytes_per_token

        dtype_bytes = self.float_bytes
        return kv_bytes_per_token(self.spec.kv, self.model.config, dtype_bytes)


def build_variant(base: LoadedModel, spec: VariantSpec, kernels: str = "quanto") -> BuiltVariant:
    """Quantize weights (a copy; baseline untouched) and measure the bytes held (from the packed form, before
    ``kernels="dequantized"`` unpacks weight-only layers); an artifact is loaded instead."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}; got {kernels!r}")
    if spec.artifact is not None:
        return build_artifact(base, spec)
    if spec.weights.activations != "none":
        from evalsuite.variants.activations import quantize_with_activations

        model = quantize_with_activations(base.model, spec.weights, base.tokenizer)
    else:
        model = quantize_weights(base.model, spec.weights, kernels)
    weights = weight_bytes(model, spec.weights, base.meta.get("weights_bytes"))
    used = "quanto"
    if kernels == "dequantized" and model is not base.model and dequantize_linears(model, like=base.model):
        used = "dequantized"
    if model is not base.model and packed_model(base.model):
        pack_linears(model)  # like the baseline's (a deep copy starts unpacked; quantization adds Linear layers)
    if model is not base.model and base.meta.get("attention") == NAME:
        pad_small_batches(model)  # the Linear layers quantization replaced are padded like the baseline's
    return BuiltVariant(spec=spec, model=model, tokenizer=base.tokenizer, weights=weights, kernels=used,
                        same_as_base=_disguised_baseline(spec, model, base))


def _disguised_baseline(spec: VariantSpec, model: Any, base: LoadedModel) -> bool:
    """A variant whose forward is the baseline's own (``variants.identical``); a bf16 spec under another name is
    the baseline's model itself."""
    from evalsuite.variants.identical import same_computation

    return spec.kv is None and same_computation(model, base.model)


def build_artifact(base: LoadedModel, spec: VariantSpec) -> BuiltVariant:
    """Load a ``ckpt:`` artifact at the baseline's dtype, on the baseline's device, after checking it pairs with the
    baseline (same tokenizer, special tokens, chat template and logit width); its bytes and fingerprint are the
    artifact's own."""
    from evalsuite.errors import EvalsuiteError
    from evalsuite.models.device import model_device
    from evalsuite.models.loader import load_pretrained
    from evalsuite.variants.artifact import artifact_bytes, artifact_fingerprint, check_pairing

    path = str(spec.artifact)
    check_pairing(base.tokenizer, path, spec.name)
    model, _, source = load_pretrained(path, base.dtype, model_device(base.model))
    model.eval()
    got, want = model.config.vocab_size, base.model.config.vocab_size
    if got != want:
        raise EvalsuiteError(f"artifact variant {spec.name!r} cannot be paired with the baseline: "
                             f"{got} output logits vs the baseline's {want}")
    ab = artifact_bytes(path)
    weights = WeightBytes(measured=ab.total, formula=ab.total, quantized_params=ab.quantized_params,
                          unquantized_params=ab.unquantized_params, float_bytes=base.meta.get("weights_bytes"))
    return BuiltVariant(spec=spec, model=model, tokenizer=base.tokenizer, weights=weights,
                        fingerprint=artifact_fingerprint(path), source=source,
                        same_as_base=_disguised_baseline(spec, model, base))
