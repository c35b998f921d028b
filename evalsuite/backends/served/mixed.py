"""Mixed runs: an in-process baseline (and in-process variants) next to ``openai:URL#name`` served variants.

Composes an ``InProcessBackend`` with one ``EndpointClient`` per served variant. A served variant answers the
*same rendered prompt text* the baseline used (the baseline's chat template, sent raw to ``/completions``), with
the task's generation settings and per-row seeds, and is scored by ``score_sample``. Its KLD is teacher-forced on
the baseline's answer where the server returns prompt log-probs (``served_kld``: top-k + rest bucket, a lower
bound), else the top-k approximation over the two generations (``endpoint_kld.topk_kld``); every KLD row records
which (``KLDResult.method``). A served variant whose tokenizer differs from the baseline's is refused before
anything is generated (``served_pairing``).
"""
from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from evalsuite.errors import EvalsuiteError
from evalsuite.run.backend import ModelIdentity, VariantRef
from evalsuite.backends.inprocess.inprocess import KLD_METHOD as INPROCESS_METHOD
from evalsuite.backends.inprocess.inprocess import InProcessBackend
from evalsuite.run.prepare import PreparedTask
from evalsuite.store.records import KLDResult, SampleResult, VariantInfo
from evalsuite.backends.served.endpoint import EndpointClient, EndpointPool, EndpointSpec, is_endpoint, parse_endpoint
from evalsuite.backends.served.endpoint_backend import KLD_METHOD as TOPK_TEXT
from evalsuite.backends.served.endpoint_kld import topk_kld
from evalsuite.backends.served.logprob_log import LogprobLog, generate_logged
from evalsuite.backends.served.kld import METHOD, METHOD_TEXT, align_answer, baseline_entries, served_kld, \
    text_to_id, token_texts
from evalsuite.backends.served.pairing import check_served_pairing
from evalsuite.tasks.base import TaskContext

TOPK = "served-topk"  # the fallback: top-k logprobs of the two generations (not teacher-forced)
KLD_METHOD = (f"in-process variants: {INPROCESS_METHOD}; {METHOD_TEXT}; where a server returns no prompt "
              f"log-probs or tokenizes an answer differently ({TOPK}): {TOPK_TEXT}")


def split_variants(requested: Sequence[Any]) -> tuple[list[Any], list[EndpointSpec]]:
    """(in-process variant specs, served ``openai:`` variants) of a requested list."""
    served = [parse_endpoint(v) for v in requested if isinstance(v, str) and is_endpoint(v)]
    return [v for v in requested if not (isinstance(v, str) and is_endpoint(v))], served


@dataclass
class MixedBackend:
    """Backend whose baseline runs in-process (``local``) and some variants on OpenAI-compatible servers."""

    local: InProcessBackend
    workdir: Path
    seed: int = 1234
    concurrency: int = 4
    top_k: int = 5  # 0: ask for no log-probs (no KLD for served variants)
    kld_method: str = KLD_METHOD
    _clients: dict[str, EndpointClient] = field(default_factory=dict)
    _vocab: dict[str, int] | None = None

    def variants(self, requested: Sequence[Any]) -> list[VariantRef]:
        """In-process specs (baseline first), then the served ones: each probed and its tokenizer checked."""
        local, served = split_variants(requested)
        specs: list[VariantRef] = list(self.local.variants(local))
        names = [s.name for s in specs] + [s.name for s in served]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise EvalsuiteError(f"variant listed twice: {', '.join(dup)} (name served variants with #NAME)")
        tokenizer = self.local.tokenizer_only()
        for spec in served:
            client = EndpointClient(spec)
            client.probe()
            check_served_pairing(tokenizer, client, spec.name)
            self._clients[spec.name] = client
        return specs + served

    def load(self) -> ModelIdentity:
        return self.local.load()  # the run is keyed by the in-process baseline

    def settings(self) -> dict[str, Any]:
        return self.local.settings()

    def task_context(self) -> TaskContext:
        return self.local.task_context()

    def generate(self, variant: VariantRef, name: str, task: PreparedTask, indices: Sequence[int],
                 batch_size: int) -> Iterator[list[SampleResult]]:
        if not isinstance(variant, EndpointSpec):
            yield from self.local.generate(variant, name, task, indices, batch_size)
            return
        prompts = self.local.prompts(task)
        raw = [dataclasses.replace(task.samples[i], messages=None, prompt=prompts[i][0]) for i in indices]
        pool = EndpointPool(self._clients[variant.name], self.concurrency, self.top_k)
        yield from generate_logged(pool, LogprobLog(self.workdir), self.seed, name, task, indices, raw,
                                   [prompts[i][0] for i in indices])

    def kld(self, variant: VariantRef, name: str, task: PreparedTask, indices: Sequence[int],
            answers: Sequence[str], batch_size: int) -> Iterator[list[KLDResult]]:
        """In-process variants as ``InProcessBackend.kld``; served ones teacher-forced where the server allows,
        else top-k; a sample with neither (no log-probs at all) gets no row."""
        if not isinstance(variant, EndpointSpec):
            yield from self.local.kld(variant, name, task, indices, answers, batch_size)
            return
        if not self.top_k:
            return
        client, prompts = self._clients[variant.name], self.local.prompts(task)
        generated = LogprobLog(self.workdir).read(name)
        tokenizer = self.local.loaded.tokenizer
        for start in range(0, len(indices), batch_size):
            chunk, texts = list(indices[start:start + batch_size]), list(answers[start:start + batch_size])
            base_lp, ans_ids = self.local.baseline_logprobs(task, chunk, texts)
            with ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"kld-{name}") as ex:
                echoes = list(ex.map(lambda j: client.echo(prompts[chunk[j]][0] + (texts[j] or tokenizer.eos_token),
                                                           self.top_k), range(len(chunk))))
            rows = []
            for j, i in enumerate(chunk):
                sid, ids = task.samples[i].id, ans_ids[j]
                lp = base_lp[j, :len(ids)]
                seg, why = align_answer(echoes[j][0], echoes[j][1], token_texts(tokenizer, ids))
                if why:
                    self._note(name, task.name, sid, why)
                if seg:
                    kls, agree, n = served_kld(lp, ids, seg, self.vocab(), tokenizer)
                    rows.append(KLDResult(name, task.name, sid, tuple(kls), agree, n, METHOD))
                elif generated.get((task.name, sid)):
                    base = baseline_entries(lp, ids, tokenizer, self.top_k)
                    kls, agree, n = topk_kld(base, generated[(task.name, sid)])
                    rows.append(KLDResult(name, task.name, sid, kls, agree, n, TOPK))
            yield rows

    def _note(self, name: str, task: str, sid: str, why: str) -> None:
        """Record why a sample's KLD could not be teacher-forced (next to the run's store)."""
        LogprobLog(self.workdir).note(name, {"task": task, "id": sid, "reason": why})

    def vocab(self) -> dict[str, int]:
        """Token text -> id of the baseline's tokenizer (built once)."""
        if self._vocab is None:
            self._vocab = text_to_id(self.local.loaded.tokenizer)
        return self._vocab

    def same_as_baseline(self, variant: VariantRef) -> bool:
        return not isinstance(variant, EndpointSpec) and self.local.same_as_baseline(variant)

    def verifies(self, variant: VariantRef) -> str:
        """In-process variants are verified as ``InProcessBackend`` verifies them; served ones generate."""
        return "served variants generate every answer" if isinstance(variant, EndpointSpec) else \
            self.local.verifies(variant)

    def verify(self, variant: VariantRef, name: str, task: PreparedTask, indices: Sequence[int], refs: Any,
               outputs: Sequence[str], batch_size: int) -> Iterator[list[Any]]:
        yield from self.local.verify(variant, name, task, indices, refs, outputs, batch_size)

    def info(self, variant: VariantRef, name: str) -> VariantInfo:
        if not isinstance(variant, EndpointSpec):
            return self.local.info(variant, name)
        client = self._clients[variant.name]
        return VariantInfo(variant=name, spec=variant.to_dict(), weight_bytes=0, weight_formula_bytes=0,
                           fingerprint=client.fingerprint(), source=client.served_model or variant.url)

    def release(self, variant: VariantRef) -> None:
        if not isinstance(variant, EndpointSpec):
            self.local.release(variant)

    def close(self) -> None:
        self.local.close()
