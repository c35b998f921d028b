"""``EvalsuiteLM``: an lm-evaluation-harness model that runs an evalsuite model + variant (weights and KV cache).

Generation goes through evalsuite's own ``iter_generate`` (same batching, stop handling and outputs as
``evalsuite run`` for the same prompts and batch size); log-likelihoods feed the continuation after the context
so a quantized KV cache is actually read (see ``evalsuite.lmeval.likelihood``).
"""
from __future__ import annotations

import json
import logging
from collections import defaultdict
from typing import Any

from lm_eval.api.model import LM
from tqdm.auto import tqdm

from evalsuite.errors import EvalsuiteError
from evalsuite.lmeval.likelihood import Pair, encode_pair, rolling_pairs, score_pairs
from evalsuite.models.loader import LoadedModel
from evalsuite.backends.inprocess.generate import iter_generate
from evalsuite.tasks.base import GenSettings
from evalsuite.variants.build import BuiltVariant, build_variant
from evalsuite.variants.spec import VariantSpec, parse_variant

log = logging.getLogger(__name__)

#: lm-eval generation kwargs this model understands (others are ignored with a warning).
GEN_KWARGS = {"until", "max_gen_toks", "do_sample", "temperature"}
DEFAULT_MAX_GEN_TOKS = 256
#: a doc field (written by ``evalsuite export-lm-eval``) saying how to tokenize its prompt
ADD_SPECIAL_FIELD = "add_special_tokens"


def _batch_size(value: int | str | None, default: int = 16) -> int:
    """lm-eval passes ints, numeric strings or 'auto' / 'auto:N' (-> the default)."""
    if value is None or str(value).startswith("auto"):
        return default
    try:
        n = int(value)
    except ValueError:
        raise EvalsuiteError(f"bad batch_size {value!r}: give an integer or 'auto'") from None
    if n < 1:
        raise EvalsuiteError(f"bad batch_size {value!r}: must be >= 1")
    return n


class EvalsuiteLM(LM):
    """lm-eval model ``evalsuite``: ``model_args="model=default,variant=w4g64+kv4g32,dtype=bfloat16,batch_size=16"``.

    ``device`` (``model_args`` ``device=...`` or lm-eval's ``--device``): auto (the default: CUDA when present),
    cpu, cuda or cuda:N, as ``evalsuite run --device``. From Python, ``model`` may be an already-loaded
    ``LoadedModel`` (it stays where it is loaded; ``device`` is then ignored) and ``variant`` a spec string, a
    VariantSpec or an already-built ``BuiltVariant`` (then ``model`` is not needed).
    """

    def __init__(self, model: str | LoadedModel = "default", variant: str | VariantSpec | BuiltVariant = "bf16",
                 dtype: str = "auto", batch_size: int | str | None = 16, max_batch_tokens: int = 24576,
                 seed: int = 1234, max_length: int | None = None, chunk_tokens: int = 128,
                 add_special_tokens: bool = True, device: Any = None, max_batch_size: Any = None) -> None:
        super().__init__()
        if isinstance(variant, BuiltVariant):
            self.built = variant
            self.model_name = model.name if isinstance(model, LoadedModel) else str(model)
        else:
            base = model if isinstance(model, LoadedModel) else _load(str(model), dtype, device)
            spec = variant if isinstance(variant, VariantSpec) else parse_variant(str(variant))
            self.built = build_variant(base, spec)
            self.model_name = base.name
        tok = self.built.tokenizer
        self.batch_size = _batch_size(batch_size)
        self.max_batch_tokens = int(max_batch_tokens)
        self.seed = int(seed)
        self.chunk_tokens = int(chunk_tokens)
        self.add_special_tokens = bool(add_special_tokens)
        self.max_length = int(max_length or _model_max_length(self.built.model, tok))
        self.prefix_id = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        self._chat_templated = False

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> "EvalsuiteLM":
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict[str, Any], additional_config: dict | None = None) -> "EvalsuiteLM":
        """``model_args`` win over lm-eval's own ``--batch_size`` etc. (no duplicate-keyword errors). lm-eval
        passes ``device="cuda:0"`` unless told otherwise; like its HF model, that falls back to ``auto`` where CUDA
        is absent (a ``device=`` in ``model_args`` stays strict)."""
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k not in arg_dict}
        if "device" in extra and str(extra["device"]).startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                extra["device"] = "auto"
        return cls(**arg_dict, **extra)

    # --- lm-eval plumbing -------------------------------------------------------------------------------------
    @property
    def device(self) -> Any:
        return self.built.model.device

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.built.tokenizer, "name_or_path", "tokenizer")).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.built.tokenizer, "chat_template", None)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """lm-eval's ``--apply_chat_template``: the rendered text already holds the special tokens."""
        self._chat_templated = True
        return self.built.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                        add_generation_prompt=add_generation_prompt)

    def get_model_info(self) -> dict[str, Any]:
        return {"evalsuite_model": self.model_name, "evalsuite_variant": self.built.name,
                "evalsuite_spec": self.built.spec.to_dict()}

    def add_special(self, doc: Any) -> bool:
        """Whether a request's prompt is tokenized with special tokens: the doc's own ``add_special_tokens`` field
        (``evalsuite export-lm-eval`` writes it), else ``add_special_tokens`` unless lm-eval applied a chat
        template (the rendered text then holds them)."""
        if isinstance(doc, dict) and ADD_SPECIAL_FIELD in doc:
            return bool(doc[ADD_SPECIAL_FIELD])
        return self.add_special_tokens and not self._chat_templated

    # --- requests ---------------------------------------------------------------------------------------------
    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Greedy (or sampled) generation with the variant's KV cache, grouped by identical generation kwargs."""
        groups: dict[str, list[int]] = defaultdict(list)
        for i, req in enumerate(requests):
            groups[json.dumps(req.args[1], sort_keys=True, default=str)].append(i)
        out: list[str] = [""] * len(requests)
        bar = tqdm(total=len(requests), desc=f"evalsuite {self.built.name}: generate", disable=disable_tqdm)
        for indices in groups.values():
            gen = gen_settings(requests[indices[0]].args[1])
            prompts = [(requests[i].args[0], self.add_special(requests[i].doc)) for i in indices]
            for idx, gens in iter_generate(self.built.model, self.built.tokenizer, prompts, gen,
                                           self.built.make_cache, max_batch=self.batch_size,
                                           max_tokens=self.max_batch_tokens, seed=self.seed):
                for j, g in zip(idx, gens):
                    out[indices[j]] = g.text
                    self.cache_hook.add_partial("generate_until", requests[indices[j]].args, g.text)
                bar.update(len(idx))
        bar.close()
        return out

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """(log P(continuation | context), greedy?) with the continuation fed after the context through the cache."""
        tok = self.built.tokenizer
        pairs = [encode_pair(tok, req.args[0], req.args[1], self.add_special(req.doc), self.prefix_id,
                             self.max_length) for req in requests]
        results = self._score(pairs, "loglikelihood", disable_tqdm)
        for req, res in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood", req.args, res)
        return results

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Whole-text log-likelihood over disjoint windows of ``max_length`` tokens, continuation in chunks."""
        tok = self.built.tokenizer
        pairs: list[Pair] = []
        owner: list[int] = []
        for r, req in enumerate(requests):
            windows = rolling_pairs(tok(req.args[0], add_special_tokens=False)["input_ids"], self.prefix_id,
                                    self.max_length)
            pairs += windows
            owner += [r] * len(windows)
        totals = [0.0] * len(requests)
        for r, (lp, _) in zip(owner, self._score(pairs, "loglikelihood_rolling", disable_tqdm)):
            totals[r] += lp
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def _score(self, pairs: list[Pair], what: str, disable_tqdm: bool) -> list[tuple[float, bool]]:
        bar = tqdm(total=len(pairs), desc=f"evalsuite {self.built.name}: {what}", disable=disable_tqdm)
        pad = self.built.tokenizer.pad_token_id
        res = score_pairs(self.built.model, pairs, pad if pad is not None else self.prefix_id,
                          self.built.make_cache, self.batch_size, self.max_batch_tokens, self.chunk_tokens,
                          progress=bar.update)
        bar.close()
        return res


def gen_settings(kwargs: dict[str, Any] | None, default_max: int = DEFAULT_MAX_GEN_TOKS) -> GenSettings:
    """lm-eval ``generation_kwargs`` -> evalsuite GenSettings (``until`` -> stop, ``max_gen_toks`` -> tokens)."""
    kwargs = dict(kwargs or {})
    ignored = sorted(set(kwargs) - GEN_KWARGS)
    if ignored:
        log.warning("evalsuite lm-eval model ignores generation kwargs: %s", ", ".join(ignored))
    until = kwargs.get("until") or []
    stop = (until,) if isinstance(until, str) else tuple(until)
    temperature = float(kwargs.get("temperature") or 0.0) if kwargs.get("do_sample") else 0.0
    return GenSettings(max_new_tokens=int(kwargs.get("max_gen_toks") or default_max), stop=stop,
                       temperature=temperature)


def _load(name: str, dtype: str, device: Any = None) -> LoadedModel:
    from evalsuite.models import load_model

    return load_model(name, dtype, str(device) if device is not None else "auto")


def _model_max_length(model: Any, tokenizer: Any) -> int:
    """The model's context window (capped by a sane tokenizer limit), else 2048."""
    n = getattr(model.config, "max_position_embeddings", None) or 2048
    tok_max = getattr(tokenizer, "model_max_length", None)
    return int(min(n, tok_max)) if tok_max and tok_max < 1_000_000 else int(n)
