"""Load a causal LM from ``default`` (embedded), a local folder, a GGUF file, or a Hugging Face id."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from evalsuite.dims import head_dim as config_head_dim
from evalsuite.errors import EvalsuiteError
from evalsuite.models.attention import use_invariant_kernels
from evalsuite.models.embedded import converted_folder, embedded_gguf
from evalsuite.models.fingerprint import fingerprint

DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32,
          "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16}


@dataclass
class LoadedModel:
    """A model ready to evaluate: the baseline of every comparison."""

    model: Any  # transformers PreTrainedModel
    tokenizer: Any
    name: str
    source: str
    dtype: str
    fingerprint: str
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))


def resolve_dtype(dtype: str) -> torch.dtype:
    if dtype not in DTYPES:
        raise EvalsuiteError(f"unknown dtype {dtype!r}; valid: auto, bfloat16, float32, float16")
    return DTYPES[dtype]


def resolve_source(name: str) -> Path | str:
    """Map a model argument to a loadable folder (GGUF files are converted once) or a hub id."""
    if name == "default":
        return converted_folder(embedded_gguf())
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise EvalsuiteError(f"GGUF file not found: {path}")
        return converted_folder(path.resolve())
    if path.exists():
        if not (path / "config.json").exists():
            raise EvalsuiteError(f"model folder {path} has no config.json")
        return path.resolve()
    if name.count("/") == 1 and not name.startswith((".", "/")):
        return name  # a hub id: resolved from the local HF cache (offline) or the hub
    raise EvalsuiteError(f"model {name!r} not found: give 'default', a folder, a .gguf file, or an HF id")


def hub_options(source: Path | str) -> dict[str, Any]:
    """``from_pretrained`` keywords for ``source``: a hub id is read from the local Hugging Face cache only
    (``local_files_only``), unless ``$HF_HUB_OFFLINE`` is set to a false value. Passed per call, not set in
    ``os.environ``: huggingface_hub reads that variable once, when it is imported (before any model loads), so
    setting it later would neither keep this process offline nor leave the caller's environment as it was."""
    allowed = os.environ.get("HF_HUB_OFFLINE", "1").strip().lower() in ("0", "false", "no", "off")
    return {"local_files_only": True} if isinstance(source, str) and not allowed else {}


def load_tokenizer(name: str = "default") -> Any:
    """Only the tokenizer of a model argument (e.g. to render prompts for an export)."""
    from transformers import AutoTokenizer

    try:
        source = resolve_source(name)
        return AutoTokenizer.from_pretrained(str(source), **hub_options(source))
    except OSError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise EvalsuiteError(f"cannot load the tokenizer of {name!r}: {first}") from None


def load_pretrained(name: str, dtype: str = "bfloat16", device: Any = "cpu") -> tuple[Any, Any, str]:
    """(model, tokenizer, resolved source) of a model argument in ``dtype`` on ``device`` (a ``torch.device`` or
    a ``--device`` string; see ``placement``); a folder's own quantization config (whatever transformers loads on
    this device) applies, a GGUF file is dequantized (converted once)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evalsuite.models.device import resolve_device

    torch_dtype = resolve_dtype(dtype)
    target = device if isinstance(device, torch.device) else resolve_device(device)
    source = resolve_source(name)
    try:
        tok = AutoTokenizer.from_pretrained(str(source), **hub_options(source))
        model = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch_dtype, **hub_options(source),
                                                     **placement(source, target, torch_dtype))
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EvalsuiteError(f"cannot load model {name!r}: {first}") from None
    use_invariant_kernels(model)
    return model, tok, str(source)


def placement(source: Path | str, device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """``from_pretrained`` keywords placing a model on ``device``.

    The CPU: none (transformers' default, exactly as before ``--device`` existed). A GPU: ``device_map`` onto it
    when the weights fit its free memory (with 10% headroom for activations and the KV cache), else
    ``device_map="auto"``: accelerate fills the visible GPUs, then the CPU. Inputs go to ``model.device`` (the
    first shard) and accelerate moves the outputs back there, so the rest of the suite does not see the split."""
    if device.type != "cuda":
        return {}
    need = weights_nbytes(source, dtype)
    free, _ = torch.cuda.mem_get_info(device)
    if need is None or need * 1.1 <= free:
        return {"device_map": {"": device.index or 0}}
    return {"device_map": "auto"}


def weights_nbytes(source: Path | str, dtype: torch.dtype) -> int | None:
    """Bytes of the model's parameters in ``dtype`` (tied weights once), from its config on an empty (meta)
    model; None if unknown."""
    try:
        empty = empty_model(source)
        empty.tie_weights()  # not applied on the meta device by itself
        return sum(p.numel() for p in empty.parameters()) * dtype.itemsize
    except Exception:  # an exotic config: place it on the device and let the load say if it does not fit
        return None


def linear_shapes(model: Any) -> dict[str, tuple[int, int]]:
    """Name -> (out, in) of every ``torch.nn.Linear`` of ``model`` (what quanto quantizes)."""
    return {n: (m.out_features, m.in_features) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


def empty_model(source: Path | str) -> Any:
    """The model of ``source``'s config on the meta device: its modules and shapes, no weights read."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    with init_empty_weights():
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(source), **hub_options(source)))


def load_model(name: str = "default", dtype: str = "auto", device: str = "auto") -> LoadedModel:
    """Load tokenizer + model in ``dtype`` on ``device`` (``evalsuite.models.device``), eval mode, with a content
    fingerprint; ``meta["device"]`` records where it runs (``meta["device_map"]`` when spread over devices).

    ``auto`` on the CPU: weights loaded in bf16 (the fingerprint is theirs), then computed in whichever of bf16 /
    fp32 this machine multiplies faster at the model's shapes (``evalsuite.models.dtype``, measured, never
    assumed): fp32 holds every bf16 value exactly, so the weights stay BF16-valued; byte figures count them at 2
    bytes. ``auto`` on CUDA: bf16 (GPUs with bf16 tensor cores run it faster; nothing is measured). Sets MKL's
    reproducibility mode first (``evalsuite.cpu.mkl.choose_cbwr``): the one process-wide choice loading a model
    makes."""
    from evalsuite.cpu.mkl import choose_cbwr
    from evalsuite.models.device import resolve_device

    choose_cbwr()  # MKL's strict mode, unless the user chose one (``evalsuite.cpu.mkl``: effective before MKL's first call)
    target = resolve_device(device)
    auto = dtype == "auto"
    model, tok, source = load_pretrained(name, "bfloat16" if auto else dtype, target)
    loaded = wrap_model(model, tok, name=name, source=source)
    if getattr(model, "hf_device_map", None) and len(set(model.hf_device_map.values())) > 1:
        loaded.meta["device_map"] = "auto"
    if auto and target.type == "cuda":
        loaded.meta["dtype_choice"] = "auto dtype: bfloat16 (CUDA: bf16, not measured)"
        return loaded
    return with_measured_dtype(loaded) if auto else loaded


def with_measured_dtype(loaded: LoadedModel) -> LoadedModel:
    """Compute in the faster of bf16 / fp32 on this machine (the fingerprint stays that of the loaded weights)."""
    from evalsuite.models.dtype import choose_compute_dtype

    choice = choose_compute_dtype(loaded.model.config)
    loaded.meta["dtype_choice"] = choice.describe()
    if choice.dtype != loaded.dtype:
        loaded.meta["weights_dtype"] = loaded.dtype
        loaded.meta["weights_bytes"] = DTYPES[loaded.dtype].itemsize
        loaded.model.to(DTYPES[choice.dtype])
        loaded.dtype = choice.dtype
    return loaded


def wrap_model(model: Any, tokenizer: Any, name: str, source: str = "memory") -> LoadedModel:
    """Wrap an in-memory model (e.g. a tiny test model) the same way ``load_model`` does."""
    model.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    from evalsuite.models.device import device_name, model_device

    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    cfg = model.config
    meta = {"device": device_name(model_device(model)),
            "n_params": sum(p.numel() for p in model.parameters()),
            "num_layers": cfg.num_hidden_layers,
            "num_kv_heads": getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
            "head_dim": config_head_dim(cfg),
            "max_positions": getattr(cfg, "max_position_embeddings", None),
            "attention": use_invariant_kernels(model)}
    return LoadedModel(model=model, tokenizer=tokenizer, name=name, source=source, dtype=dtype,
                       fingerprint=fingerprint(model), meta=meta)


@dataclass(frozen=True)
class ModelFactory:
    """Picklable ``load_model(name, dtype, device)`` (what an in-process backend loads, here or in a Ray worker)."""

    name: str = "default"
    dtype: str = "auto"
    device: str = "auto"

    def __call__(self) -> LoadedModel:
        return load_model(self.name, self.dtype, self.device)

    def tokenizer(self) -> Any:
        """Only the tokenizer (no weights), set up as ``load_model`` sets it."""
        tok = load_tokenizer(self.name)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        tok.padding_side = "left"
        return tok

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """Name -> (out, in) of every Linear layer, from an empty (meta) model of the config: no weights read;
        empty when the config does not build one."""
        try:
            model = empty_model(resolve_source(self.name))
        except Exception:  # an exotic config: what the load makes of it decides (``variants.quanto_route``)
            return {}
        return linear_shapes(model)

    def max_positions(self) -> int | None:
        from transformers import AutoConfig

        source = resolve_source(self.name)
        return getattr(AutoConfig.from_pretrained(str(source), **hub_options(source)), "max_position_embeddings", None)


def offline() -> None:
    """Never reach the hub, for a whole process: for a command-line entry point to call before huggingface_hub,
    datasets or lm-eval are imported (``evalsuite-lm-eval``: lm-eval's own downloads). Loading a model does not
    call it (``hub_options``)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
