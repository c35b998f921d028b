"""The in-process backend: the baseline loaded in this process, each variant built from it once.

Generation: evalsuite's batched decoder (``backends.inprocess.generate``; ``n > 1`` generations as extra rows, each
seeded by ``scoring.row_seed``). A greedy variant is verified against the baseline's answer, which gives its KLD in the
same pass (``backends.inprocess.verify``); else KLD is teacher-forced on the baseline's answers
(``backends.inprocess.kld``). Prompts: ``backends.inprocess.taskprompts``; prompt K/V kept between passes under one byte
budget: ``backends.inprocess.snapshots``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from evalsuite.cpu.cpuclass import host_class
from evalsuite.cpu.mkl import cbwr_setting
from evalsuite.models.packed import setting as linear_setting
from evalsuite.cpu.onednn import isa_setting
from evalsuite.models.device import model_device
from evalsuite.models.invariance import invariant
from evalsuite.models.loader import LoadedModel
from evalsuite.run.backend import ModelIdentity
from evalsuite.backends.inprocess.decoder import encode_prefix, exact_prefill, observe_prefills
from evalsuite.backends.inprocess.forced import plan_passes
from evalsuite.backends.inprocess.generate import iter_generate
from evalsuite.backends.inprocess.generate import stop_ids
from evalsuite.backends.inprocess.kld import BaselineLogprobCache, baseline_answer_logprobs, teacher_forced_kld
from evalsuite.run.prepare import PreparedTask, prepare_variants
from evalsuite.store.records import KLDResult, Reference, SampleResult, VariantInfo
from evalsuite.run.scoring import row_seed, score_sample
from evalsuite.backends.inprocess.snapshots import PROMPT_KV_BYTES, PromptSnapshots, PromptStore
from evalsuite.backends.inprocess.taskprompts import TaskPrompts
from evalsuite.backends.inprocess.info import variant_info
from evalsuite.backends.inprocess.speed import SpeedProbe
from evalsuite.backends.inprocess.verify import Checked, Side, Verified, as_generation, baseline_logprobs
from evalsuite.backends.inprocess.verify import check_batch, finish, pooled, unverifiable
from evalsuite.variants.build import BuiltVariant, build_variant
from evalsuite.tasks.base import TaskContext
from evalsuite.variants.spec import VariantSpec

KLD_METHOD = "teacher-forced on the baseline's answer tokens (full vocabulary, in-process)"
#: KLD rows measured by the verification pass (the baseline's generated ids, chunked as decoding flushes)
VERIFY_KLD = "verify-pass"


@dataclass
class InProcessBackend:
    """``loader`` returns the baseline (``load_model(name, dtype)``, or a model built in memory by a test)."""

    loader: Callable[[], LoadedModel]
    seed: int = 1234
    max_batch_tokens: int = 24576
    max_built: int | None = None  # keep at most this many built variants (a Ray worker keeps one)
    kernels: str = "dequantized"  # weight-only variants: quanto's values unpacked once (variants.build.KERNELS)
    #: the one byte budget of the prompt K/V kept (``backends.inprocess.snapshots``; 0 = off): a variant's own from its
    #: generation for its KLD pass, the baseline's for the baseline side of every later pass
    snapshot_bytes: int = PROMPT_KV_BYTES
    #: KV-cache-only variants start generating from the baseline's prompt K/V (off by default: their answers then
    #: depend on the baseline's batching, see ``run.snapshots``)
    reuse_base_prompts: bool = False
    kld_method: str = KLD_METHOD
    #: verify weight-only variants in bf16 on kernels that are not batch-invariant too (``--verify auto``: off)
    verify_bf16: bool = True
    stop_rules: bool = False  # tasks end a row once its score is fixed (tasks.stop_rules); off beside served sides
    base: LoadedModel | None = None
    _built: dict[str, BuiltVariant] = field(default_factory=dict)
    #: (weights, artifact) of every weight-only variant built so far (kept after release): whose prompt K/V a "+kv"
    #: sibling may take
    _weight_only: dict[str, tuple[Any, str | None]] = field(default_factory=dict)
    _tokenizer: Any = None
    _task_prompts: TaskPrompts = field(init=False)
    _base_lp: BaselineLogprobCache = field(default_factory=BaselineLogprobCache)
    prompt_kv: PromptStore = field(init=False)  # the two parts below, under snapshot_bytes
    snapshots: PromptSnapshots = field(init=False)  # a variant's own (a new part per generation)
    base_prompts: PromptSnapshots = field(init=False)  # the baseline's (a cache: its oldest make room)
    speed_probe: SpeedProbe = field(default_factory=SpeedProbe)  # TTFT / ITL of every variant on fixed prompts

    def __post_init__(self) -> None:
        self._task_prompts = TaskPrompts(self.tokenizer_only)
        self.prompt_kv = PromptStore(self.snapshot_bytes)
        self.snapshots = self.prompt_kv.part("variant")
        self.base_prompts = self.prompt_kv.part("base", evict=True)

    @classmethod
    def of(cls, base: LoadedModel, **kw: Any) -> "InProcessBackend":
        """A backend over an already loaded model."""
        return cls(loader=lambda: base, base=base, **kw)

    def variants(self, requested: Sequence[Any]) -> list[VariantSpec]:
        """Parsed specs; refused here: an artifact whose tokenizer or chat template differs (tokenizers only), a
        weight spec that would need quanto's CUDA extension on this GPU (``variants.quanto_route``)."""
        from evalsuite.variants.artifact import check_pairing
        from evalsuite.variants.quanto_route import check_backend_specs

        specs = prepare_variants(list(requested))
        for spec in (s for s in specs if s.artifact is not None):
            check_pairing(self.tokenizer_only(), spec.artifact, spec.name)
        check_backend_specs(specs, self.kernels, self.base, self.loader)
        return specs

    def load(self) -> ModelIdentity:
        if self.base is None:
            self.base = self.loader()
        b = self.base
        return ModelIdentity(name=b.name, fingerprint=b.fingerprint, dtype=b.dtype, source=b.source, meta=b.meta)

    def settings(self) -> dict[str, Any]:
        device = self.loaded.meta.get("device", "cpu")
        return {"backend": "in-process", "compute_dtype": self.loaded.dtype,
                "device": device, "max_batch_tokens": self.max_batch_tokens,
                "weight_kernels": self.kernels, "attention": self.loaded.meta.get("attention", "sdpa"),
                "batch_invariant": invariant(self.loaded.model), "onednn_isa": isa_setting(),
                "mkl_cbwr": cbwr_setting(), "linear": linear_setting(self.loaded.model),
                **({"cpu_class": host_class()} if str(device).startswith("cpu") else {})}

    @property
    def loaded(self) -> LoadedModel:
        if self.base is None:
            self.load()
        assert self.base is not None
        return self.base

    def built(self, spec: VariantSpec) -> BuiltVariant:
        """The variant built from the baseline, once (kept until ``release``)."""
        if spec.name not in self._built:
            while self.max_built is not None and len(self._built) >= self.max_built:
                self._built.pop(next(iter(self._built)))
            built = self._built[spec.name] = build_variant(self.loaded, spec, kernels=self.kernels)
            if self.weight_only(built):
                self._weight_only[spec.name] = (spec.weights, spec.artifact)
        return self._built[spec.name]

    def release(self, variant: VariantSpec) -> None:
        """Free the variant. A weight-only variant's prompt K/V stay held (within the budget) until the next one's
        replace them: a "+kv" sibling run after it verifies from them."""
        self._built.pop(variant.name, None)
        if self.snapshots.owner not in self._weight_only:
            self.snapshots.clear()

    def spill_prompts(self, folder: Any, writable: bool = True) -> None:
        """Read the baseline's prompt K/V from ``folder`` (onto the baseline's device) where memory lacks them, and
        (``writable``) keep them there too (``backends.inprocess.spill``: beside a stored baseline, so a later run does
        not prefill its prompts again)."""
        from evalsuite.backends.inprocess.spill import PromptDisk

        device = model_device(self.loaded.model)
        self.base_prompts.spill = PromptDisk(folder, writable=writable, device=device) if self.snapshot_bytes else None

    def close(self) -> None:
        self._built.clear()
        self.snapshots.clear()
        self.base_prompts.clear()

    def task_context(self) -> TaskContext:
        """The model's own token counts (chat template included) and window; loaded only when a task asks."""
        return TaskContext(count_tokens=self._task_prompts.count_tokens, max_positions=self._max_positions,
                           model_name=getattr(self.loader, "name", None) or "the model", stop_rules=self.stop_rules)

    def tokenizer_only(self) -> Any:
        """The baseline's tokenizer, without loading the model when the loader can give it alone."""
        if self.base is not None:
            return self.base.tokenizer
        if self._tokenizer is None:
            self._tokenizer = self.loader.tokenizer() if hasattr(self.loader, "tokenizer") else self.loaded.tokenizer
        return self._tokenizer

    def _max_positions(self) -> int | None:
        if self.base is not None:
            return self.base.meta.get("max_positions")
        return self.loader.max_positions() if hasattr(self.loader, "max_positions") else None

    def prompts(self, task: PreparedTask) -> list[tuple[str, bool]]:
        """Rendered prompts (text, add_special_tokens) of every sample of ``task``."""
        return self._task_prompts.of(task)

    def prefix_len(self, task: PreparedTask) -> int:
        """Tokens all of the task's prompts share (``backends.inprocess.taskprompts``)."""
        return self._task_prompts.prefix_len(task)

    def generate(self, variant: VariantSpec, name: str, task: PreparedTask, indices: Sequence[int],
                 batch_size: int) -> Iterator[list[SampleResult]]:
        built, prompts, n = self.built(variant), self.prompts(task), max(1, task.gen.n)
        rows = [i for i in indices for _ in range(n)]  # n generations of a sample are consecutive rows
        seeds = [row_seed(self.seed, task.samples[i].id, r % n) for r, i in enumerate(rows)]
        batches = iter_generate(built.model, built.tokenizer, [prompts[i] for i in rows], task.gen,
                                built.make_cache, max_batch=batch_size * n, max_tokens=self.max_batch_tokens,
                                seed=self.seed, prefix_len=self.prefix_len(task), row_seeds=seeds, group=n)
        with observe_prefills(*self.prefill_hooks(variant, name, built)):
            for idx, gens in batches:
                by_sample: dict[int, list[Any]] = {}
                for r, g in zip(idx, gens):
                    by_sample.setdefault(rows[r], []).append(g)
                yield [score_sample(task, i, gs, name, prompts[i][0]) for i, gs in by_sample.items()]

    def prefill_hooks(self, variant: VariantSpec, name: str, built: BuiltVariant) -> tuple[Any, Any]:
        """(observer, provider) of this generation's prefills (``run.snapshots``): a weight-only variant keeps its
        prompts' K/V for its KLD pass; the baseline keeps its prompts' K/V for the baseline side of every KLD pass
        (and, with ``reuse_base_prompts``, the KV-cache-only variants start from them). The noise floor (the
        baseline under another name) recomputes."""
        self.snapshots = self.prompt_kv.part("variant", owner=name)  # the previous generation's are dropped
        if built.model is not self.loaded.model:
            return (self.snapshots.observe if self.snapshot_bytes and self.weight_only(built) else None), None
        if name != variant.name:
            return None, None
        if variant.is_baseline:
            return (self.base_prompts.observe if self.snapshot_bytes else None), None
        return None, (self.base_prompts.provide(self.loaded.model.config) if self.reuse_base_prompts else None)

    def kld(self, variant: VariantSpec, name: str, task: PreparedTask, indices: Sequence[int],
            answers: Sequence[str], batch_size: int) -> Iterator[list[KLDResult]]:
        built, prompts, p = self.built(variant), self.prompts(task), self.prefix_len(task)
        prompt_ids, tok = self._task_prompts.keys(task, indices), self.loaded.tokenizer
        lens = [len(tok(a, add_special_tokens=False)["input_ids"]) for a in answers]
        # planned as if prefilled, kept prompt K/V or not: the same batches for every variant (the baseline's cached)
        for js in plan_passes([len(k) - p for k in prompt_ids], lens, True, batch_size, self.max_batch_tokens):
            chunk, texts, keys = [indices[j] for j in js], [answers[j] for j in js], [prompt_ids[j] for j in js]
            ids = [task.samples[i].id for i in chunk]
            # kept (keep=True): a "+kv" sibling of the same weights verifies from them next
            snap = self.snapshots.take(keys, keep=True) if self.snapshots.owner == name else None
            base_snap = self.base_prompts.take(keys, keep=True)
            res = teacher_forced_kld(self.loaded.model, built.model, self.loaded.tokenizer,
                                     [prompts[i] for i in chunk], texts,
                                     built.make_cache, self._base_lp, (task.name, tuple(ids)),
                                     prefix_len=p, var_snapshot=snap, base_snapshot=base_snap,
                                     # a warm run: the baseline's prefill here serves the KV variants' passes next
                                     observe_base=self.base_prompts.observe if self.snapshot_bytes else None)
            yield [KLDResult(name, task.name, sid, tuple(k), a, n) for sid, (k, a, n) in zip(ids, res)]

    def weight_only(self, built: BuiltVariant) -> bool:
        """Own weights and an unquantized cache: its prompt K/V are kept for its KLD and a "+kv" sibling."""
        return built.model is not self.loaded.model and built.spec.kv is None

    def verifies(self, variant: VariantSpec) -> str:
        """"" when ``variant``'s greedy answers can be verified against the baseline's (``run.verify``), else why
        they are regenerated instead."""
        return unverifiable(self.built(variant), self.loaded.dtype, self.verify_bf16)

    def verify(self, variant: VariantSpec, name: str, task: PreparedTask, indices: Sequence[int],
               refs: Sequence[Reference], outputs: Sequence[str], batch_size: int
               ) -> Iterator[list[tuple[SampleResult, KLDResult, Verified]]]:
        """Verified (or diverged-then-decoded) answers of ``variant`` to ``indices`` with their KLD, in the batches
        that pad least (``forced.plan_passes``), given once their diverged rows' tails are decoded (pooled across
        batches: ``verify.pooled``); ``refs`` / ``outputs``: the baseline's ids and texts."""
        built, tok, keys = self.built(variant), self.loaded.tokenizer, self._task_prompts.keys(task, indices)
        p, prefills = self.prefix_len(task), self._prefills(built)
        if self.weight_only(built):  # its prefills serve a "+kv" sibling next
            self.snapshots = self.prompt_kv.part("variant", owner=name)
        plan = plan_passes([len(k) - p for k in keys], [len(r.ids) for r in refs], prefills, batch_size,
                           self.max_batch_tokens)
        checked = ((js, self._check_batch(built, task, [keys[j] for j in js], [refs[j] for j in js], p,
                                          [task.samples[indices[j]].id for j in js])) for js in plan)
        tails = lambda batches: finish(batches, built.model, tok, lambda: built.make_cache(False),  # noqa: E731
                                       task.gen, stop_ids(tok))
        for group in pooled(checked, tails, batch_size, self.max_batch_tokens):
            yield [self._verified_row(task, indices[j], name, outputs[j], v) for js, out in group
                   for j, v in zip(js, out)]

    def _prefills(self, built: BuiltVariant) -> bool:
        """Whether ``built``'s passes prefill their prompts (no prompt K/V of the same weights to start from)."""
        if not exact_prefill(built.make_cache()):
            return True
        if built.model is self.loaded.model:
            return False
        return self.weight_only(built) or not self._sibling_kept(built)

    def _sibling_kept(self, built: BuiltVariant) -> bool:
        """Whether the prompt K/V kept now are a weight-only variant's of ``built``'s weights."""
        return self._weight_only.get(self.snapshots.owner) == (built.spec.weights, built.spec.artifact)

    def _check_batch(self, built: BuiltVariant, task: PreparedTask, keys: list[tuple[int, ...]],
                     refs: list[Reference], p: int, ids: list[str]) -> Checked:
        base_model, tok = self.loaded.model, self.loaded.tokenizer
        rows, head = [list(k[p:]) for k in keys], list(keys[0][:p])

        def base_rows(js: list[int]) -> list[Any]:  # the rows no earlier variant's batch gave the baseline's side of
            snap = self.base_prompts.take([keys[j] for j in js], keep=True)  # its prompt K/V from its generation
            base = Side(base_model, lambda keep: None, encode_prefix(base_model, head) if snap is None else None,
                        snap)
            return baseline_logprobs(base, [rows[j] for j in js], [refs[j] for j in js], tok.pad_token_id)

        with observe_prefills(self.base_prompts.observe if self.snapshot_bytes else None):  # a reused baseline
            base_lp = self._base_lp.get_each([(task.name, "verify", i) for i in ids], base_rows)  # kept per row
        snap = self.base_prompts.take(keys, keep=True)
        if built.model is not base_model:  # a sibling's: the weight-only variant of the same weights, run before
            snap = self.snapshots.take(keys, keep=True) if self._sibling_kept(built) else None
        if snap is not None and exact_prefill(built.make_cache()):
            var = Side(built.model, built.make_cache, None, snap)  # same weights, exact prefill: same prompt K/V
        else:
            var = Side(built.model, built.make_cache, encode_prefix(built.model, head, built.make_cache()))
        own = self.weight_only(built) and self.snapshots.owner == built.name
        with observe_prefills(self.snapshots.observe if own and self.snapshot_bytes else None):
            return check_batch(var, tok, rows, refs, base_lp, stop_ids(tok))

    def _verified_row(self, task: PreparedTask, index: int, name: str, base_output: str, v: Verified
                      ) -> tuple[SampleResult, KLDResult, Verified]:
        row = score_sample(task, index, [as_generation(v, self.loaded.tokenizer, base_output, task.gen.stop)], name,
                           self.prompts(task)[index][0])
        return row, KLDResult(name, task.name, row.sample_id, tuple(v.kld[0]), *v.kld[1:], VERIFY_KLD), v

    def baseline_logprobs(self, task: PreparedTask, indices: Sequence[int], answers: Sequence[str]) -> Any:
        """(log-probs [batch, answer_len, vocab], answer ids) of the baseline teacher-forced on ``answers``, cached
        as ``kld`` caches them (a served variant's KLD compares against these)."""
        ids = tuple(task.samples[i].id for i in indices)
        prompts = [self.prompts(task)[i] for i in indices]
        return baseline_answer_logprobs(self.loaded.model, self.loaded.tokenizer, prompts, list(answers),
                                        self._base_lp, (task.name, ids), prefix_len=self.prefix_len(task))

    def same_as_baseline(self, variant: VariantSpec) -> bool:
        return self.built(variant).same_as_base

    def info(self, variant: VariantSpec, name: str) -> VariantInfo:
        return variant_info(self.built(variant), name, self.speed_probe)

