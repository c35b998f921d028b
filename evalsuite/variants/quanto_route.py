"""Which in-process weight specs reach optimum-quanto's ``quanto_cuda`` extension on a GPU, and what evalsuite does.

On a CUDA machine optimum-quanto (0.2.x) registers an extension, ``quanto_cuda``, that torch compiles from source
(nvcc and ninja, minutes) the first time one of its ops runs, and that fails where nvcc is missing. By quanto's own
dispatch (``WeightQBitsTensor.create``, ``WeightQBytesTensor.create``, ``PackedTensor.unpack``), a Linear layer of
shape (out, in) reaches it when its weights are

* **int4 / int2**, unless quanto takes its TinyGemm route: int4, group 128, bf16 compute, CUDA >= 12.1 and compute
  capability >= 8 (``torch._weight_int4pack_mm``, compiled into torch). With fp16 compute, int4 group 128 takes
  the AWQ route (the extension's GEMM). Every other case is quanto's generic packed tensor, whose ``dequantize``
  unpacks through ``quanto::unpack``, a CUDA kernel of the extension: at every forward under ``--weight-kernels
  quanto``, once per layer in ``dequantize_linears`` under ``--weight-kernels dequantized``.
* **float8, weights only** (``wf8``), in bf16/fp16 compute on capability >= 8 with widths quanto's Marlin kernel
  tiles (both >= 64, one a multiple of 64 and the other of 128): packed by the extension at ``freeze``, multiplied
  by it at every forward.
* never for int8 weights, nor for float8 with quantized activations (``qbytes_mm`` is plain torch on CUDA).

evalsuite's answer (docs/gpu.md): under ``--weight-kernels dequantized`` (the default) such a layer is frozen and
unpacked on the CPU by quanto's CPU path, which needs no build, and its unpacked weights go back to the layer's GPU:
the same values, once per variant. Under ``--weight-kernels quanto`` (quanto's modules as deployed, for speed) and
for weight + activation specs (calibrated and run as quanto modules) it is refused, in one line before the model
loads (``check_specs``) and again, as a backstop, when the variant is built.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from evalsuite.errors import EvalsuiteError
from evalsuite.variants.forms import VariantSpec, WeightSpec
from evalsuite.variants.mixed import effective_group, resolve_rules

#: what runs in-process on a GPU with quanto's kernels and no build, for the refusal's line
RUNS_ON_CUDA = ("int8 weights (w8, w8a8), wf8af8, int4 group 128 in bf16 where every quantized layer's input "
                "width is a multiple of 128 (TinyGemm, compute capability >= 8), and every KV-cache variant")


@dataclass(frozen=True)
class Gpu:
    """What quanto's dispatch reads of a CUDA device: its compute capability and torch's CUDA version."""

    capability: tuple[int, int]
    cuda: str

    @property
    def cuda_release(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self.cuda.split(".") if x.isdigit())


def cuda_gpu(device: Any) -> Gpu | None:
    """The ``Gpu`` of a CUDA ``device`` (a torch.device or its spelling); None for any other device."""
    import torch

    d = torch.device(device)
    if d.type != "cuda" or not torch.version.cuda:
        return None
    return Gpu(tuple(torch.cuda.get_device_capability(d)), str(torch.version.cuda))


def extension_route(bits: int | str, group: int | None, activations: bool, out_f: int, in_f: int, dtype: str,
                    gpu: Gpu) -> str:
    """The quanto route of one Linear on ``gpu`` that needs ``quanto_cuda`` (e.g. ``int4 group 64 (unpack)``), or
    "" when quanto runs it without the extension. ``bits``: 8, 4, 2 or ``"f8"``; ``dtype``: the compute dtype."""
    sm8 = gpu.capability[0] >= 8
    if bits == "f8":
        tiles = in_f >= 64 and out_f >= 64 and ((in_f % 64 == 0 and out_f % 128 == 0)
                                                or (in_f % 128 == 0 and out_f % 64 == 0))
        marlin = not activations and dtype in ("bfloat16", "float16") and sm8 and tiles
        return "float8 (Marlin FP8)" if marlin else ""
    if bits == 8:
        return ""
    if bits == 4 and group == 128 and sm8:
        if dtype == "float16" and out_f >= 128:
            return "int4 group 128 in float16 (AWQ)"
        if dtype == "bfloat16" and gpu.cuda_release >= (12, 1):
            return ""  # TinyGemm: torch's own kernel
    return f"int{bits} group {group} in {dtype} (unpack)"


def module_route(module: Any, gpu: Gpu) -> str:
    """``extension_route`` of a quanto module (its weight qtype, group, activations, shape and dtype)."""
    qtype = module.weight_qtype
    bits: int | str = "f8" if qtype.is_floating_point else qtype.bits
    out_f, in_f = module.weight.shape[0], module.weight.shape[-1]
    dtype = str(module.weight.dtype).replace("torch.", "")
    return extension_route(bits, module.weight_group_size, module.activation_qtype is not None, out_f, in_f,
                           dtype, gpu)


def rule_routes(spec: WeightSpec, linears: Mapping[str, tuple[int, int]], dtype: str, gpu: Gpu) -> dict[str, str]:
    """Linear name -> the route that needs ``quanto_cuda``, for every layer of a model (``linears``: name ->
    (out, in)) that ``spec`` quantizes that way on ``gpu``; empty when the spec needs no build there."""
    if spec.fmt == "none":
        return {}
    routes = {}
    for name, rule in resolve_rules(list(linears), spec).items():
        if rule is None or rule.fmt == "none":
            continue
        out_f, in_f = linears[name]
        bits: int | str = "f8" if rule.fmt == "float8" else rule.bits
        group = effective_group(in_f, rule.group) if rule.group else None
        route = extension_route(bits, group, spec.activations != "none", out_f, in_f, dtype, gpu)
        if route:
            routes[name] = route
    return routes


def model_routes(model: Any) -> dict[str, str]:
    """Module name -> ``module_route`` of every quanto module of ``model`` on a GPU whose route needs
    ``quanto_cuda`` (quantized, not yet frozen: ``freeze`` would take that route)."""
    from optimum.quanto import QModuleMixin

    routes = {}
    for name, mod in model.named_modules():
        gpu = cuda_gpu(mod.weight.device) if isinstance(mod, QModuleMixin) and mod.weight_qtype else None
        route = module_route(mod, gpu) if gpu is not None else ""
        if route:
            routes[name] = route
    return routes


def refused(spec: WeightSpec, kernels: str) -> bool:
    """Whether a layer of ``spec`` that needs ``quanto_cuda`` is refused (else it is unpacked on the CPU)."""
    return kernels == "quanto" or spec.activations != "none"


def refusal(name: str, spec: WeightSpec, routes: Mapping[str, str]) -> EvalsuiteError:
    """The one-line error refusing variant ``name`` (weights ``spec``) whose layers ``routes`` need
    ``quanto_cuda``."""
    first, route = next(iter(routes.items()))
    act = spec.activations != "none"
    why = "weight + activation variants run as quanto's modules" if act else \
        "--weight-kernels quanto runs quanto's modules"
    fix = "" if act else "; run it with --weight-kernels dequantized (the default), which needs no build"
    return EvalsuiteError(f"variant {name} cannot run in-process on this GPU: {len(routes)} of its layers (e.g. "
                          f"{first}: {route}) would need optimum-quanto's quanto_cuda extension, compiled with nvcc "
                          f"and ninja at first use, and {why}; on CUDA these run without a build: {RUNS_ON_CUDA}"
                          f"{fix}")


def check_specs(specs: Sequence[VariantSpec], linears: Mapping[str, tuple[int, int]], dtype: str, gpu: Gpu | None,
                kernels: str) -> None:
    """Refuse (one line, ``EvalsuiteError``) the first in-process weight spec that would need ``quanto_cuda`` on
    ``gpu`` and cannot be unpacked on the CPU instead (``refused``); nothing when ``gpu`` is None."""
    if gpu is None:
        return
    for spec in specs:
        if spec.artifact is not None or not refused(spec.weights, kernels):
            continue
        routes = rule_routes(spec.weights, linears, dtype, gpu)
        if routes:
            raise refusal(spec.name, spec.weights, routes)


def check_backend_specs(specs: Sequence[VariantSpec], kernels: str, base: Any = None, loader: Any = None) -> None:
    """``check_specs`` for an in-process backend, before its model loads: on the loaded ``base`` when there is one,
    else on ``loader``'s device, dtype and Linear shapes (``ModelFactory.linear_shapes``: an empty model, no weights
    read). Nothing when no spec quantizes weights in-process, the device is no GPU, or neither says (then the build
    refuses, ``freeze_routed``)."""
    from evalsuite.models.device import model_device, resolve_device
    from evalsuite.models.loader import linear_shapes

    if not any(s.artifact is None and s.weights.fmt != "none" for s in specs):
        return
    if base is not None:
        gpu = cuda_gpu(model_device(base.model))
        linears = linear_shapes(base.model) if gpu is not None else {}
        dtype = base.dtype
    elif hasattr(loader, "linear_shapes"):
        gpu = cuda_gpu(resolve_device(loader.device))
        linears = loader.linear_shapes() if gpu is not None else {}
        dtype = "bfloat16" if loader.dtype == "auto" else loader.dtype  # ``load_model``: auto is bf16 on CUDA
    else:
        return
    check_specs(specs, linears, dtype, gpu, kernels)

