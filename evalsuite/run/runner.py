"""The Runner: baseline first, then every variant, on identical samples; each group stored as it completes.

It is the one owner, for every backend (``evalsuite.run.backend``), of: which samples are still to do (resume
continues exactly where a crash stopped; the group in flight is the most that is redone), storing, the refusal to
continue a run whose model, task versions or task parameters changed (``run.identity``), stored-baseline reuse,
timing medians and the noise floor.
"""
from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tqdm.auto import tqdm

from evalsuite.errors import StoreMismatch
from evalsuite.run.backend import Backend, ModelIdentity, VariantRef
from evalsuite.core.config import RunConfig
from evalsuite.run.prepare import PreparedTask
from evalsuite.core.records import NOISE_SUFFIX, KLDResult, Reference
from evalsuite.core.store import Store
from evalsuite.run.verified import VerifyTally, audit

if TYPE_CHECKING:
    from evalsuite.run.rounds import Rounds

#: KLD method code of rows copied from the baseline (``Runner.copy_baseline``)
SAME_AS_BASELINE = "identical-to-baseline (KL 0 exactly)"


@dataclass
class Runner:
    """Runs one RunConfig through one backend into one store."""

    config: RunConfig
    backend: Backend
    tasks: list[PreparedTask]
    store: Store
    progress: bool = True
    log: Callable[[str], None] = print
    baseline_source: Any = None  # evalsuite.run.baselines.BaselineSource, optional
    deadline: float | None = None  # time.monotonic() after which no new work starts (a sequential budget)
    spent: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # task -> [seconds, samples] so far
    limits: dict[str, int] = dataclasses.field(default_factory=dict)  # task -> samples a look may reach (a chunk)

    def run(self, variants: Sequence[VariantRef], rounds: Rounds | None = None) -> None:
        """Generate + score every (variant, task); KLD for every non-baseline variant. With ``rounds`` (an
        ``evalsuite.run.rounds.Rounds``) the samples come in rounds until the gate has decided."""
        self.check_compatible(self.backend.load())
        self.check_artifacts(variants)
        baseline = variants[0]
        self.store.update_state(baseline=baseline.name, variant_order=[v.name for v in variants],
                                kld_method=self.backend.kld_method, settings=self.backend.settings())
        self.reuse_baseline(baseline.name)  # what a stored baseline covers is not generated again
        if rounds is None:
            for variant in variants:  # one variant built at a time
                self.round(variants, {variant.name: {t.name for t in self.tasks}})
                self.finish(variant)
        else:
            rounds.drive(self, variants)  # every variant stays built across rounds (memory for fewer builds)
            for variant in variants:
                self.finish(variant)
        if self.config.noise_floor:
            self.noise_floor(baseline)

    def round(self, variants: Sequence[VariantRef], active: dict[str, set[str]], task_major: bool = False) -> None:
        """Generate (and KLD) the samples still to do of the ``active`` tasks of each variant named there; the
        baseline runs whatever any active variant needs. ``task_major`` goes task by task through every variant
        (so a deadline cuts all variants alike), else variant by variant (one built variant at a time)."""
        baseline = variants[0]
        kld_batch = max(1, self.config.batch_size // 2)
        union = set().union(*active.values())
        wanted = {v.name: (union if v is baseline else set()) | active.get(v.name, set()) for v in variants}
        pairs = ([(v, t) for t in self.tasks for v in variants] if task_major
                 else [(v, t) for v in variants for t in self.tasks])
        for variant, task in pairs:
            if task.name not in wanted[variant.name] or self.out_of_time():
                continue
            if variant is not baseline and self.copies_baseline(variant):
                self.copy_baseline(baseline.name, variant.name, task)
                continue
            if variant is not baseline and self.config.verify:
                self.verify(variant, baseline.name, task)
            self.generate(variant, variant.name, self.config.batch_size, [task],
                          "regenerated" if variant is not baseline and self.config.verify else "generated")
            if variant is not baseline and self.config.kld and not self.out_of_time():
                self.kld(variant, variant.name, baseline.name, kld_batch, [task])

    def copies_baseline(self, variant: VariantRef) -> bool:
        """Whether ``variant``'s answers are the baseline's (``Backend.same_as_baseline``; ``--recompute-identical``
        turns this off); said once per variant and recorded in the run's meta."""
        if not self.config.reuse_identical or not self.backend.same_as_baseline(variant):
            return False
        same = self.store.state().same_as_baseline
        if variant.name not in same:
            self.log(f"{variant.name}: computes exactly what the baseline computes (bit-identical weights, "
                     "unquantized cache): its answers are the baseline's, copied, and its KLD is 0")
            self.store.update_state(same_as_baseline=same + [variant.name])
        return True

    def copy_baseline(self, baseline: str, name: str, task: PreparedTask) -> None:
        """Store the baseline's answers to ``task``'s samples as ``name``'s, with KLD 0 on every answer token."""
        ids = {task.samples[i].id for i in self.window(task)}
        done, kld_done = self.store.done_ids(name, task.name), self.store.kld_done(name, task.name)
        rows = [r for r in self.store.samples(baseline, task.name) if r.sample_id in ids]
        self.store.put_samples(dataclasses.replace(r, variant=name) for r in rows if r.sample_id not in done)
        if self.config.kld:
            self.store.put_kld(KLDResult(name, task.name, r.sample_id, (0.0,) * max(1, r.n_tokens),
                                         max(1, r.n_tokens), max(1, r.n_tokens), SAME_AS_BASELINE)
                               for r in rows if r.sample_id not in kld_done)

    def out_of_time(self) -> bool:
        """Whether the run's deadline (a sequential run's wall-clock budget) has passed."""
        return self.deadline is not None and time.monotonic() > self.deadline

    def set_deadline(self, deadline: float | None) -> None:
        """No new work starts after ``deadline`` (``time.monotonic()``; None: none)."""
        self.deadline = deadline

    def set_limits(self, limits: dict[str, int]) -> None:
        """Work only on the first ``limits[task]`` samples of a task (a sequential look's chunk; {}: all)."""
        self.limits = dict(limits)

    def window(self, task: PreparedTask) -> range:
        """Indices of ``task``'s samples this call may work on (``limits``)."""
        return range(min(len(task.samples), self.limits.get(task.name, len(task.samples))))

    def reorder(self, names: Sequence[str]) -> None:
        """Take the tasks in this order from now on (a new list: the list the Runner was given is left as is)."""
        by_name = {t.name: t for t in self.tasks}
        self.tasks = [by_name[n] for n in names]

    def finish(self, variant: VariantRef) -> None:
        """Record the variant's bytes and timings, then free it."""
        self.record_info(variant, variant.name)
        self.backend.release(variant)
        gc.collect()

    def check_compatible(self, identity: ModelIdentity) -> None:
        """Refuse to continue a run whose model content, task versions or task parameters changed
        (``run.identity``); record what this run is."""
        from evalsuite.run.identity import check_tasks, record_tasks

        fp = self.store.state().fingerprint
        if fp is not None and fp != identity.fingerprint:
            raise StoreMismatch(f"model fingerprint changed ({fp} stored, {identity.fingerprint} loaded): "
                                "start a new run")
        check_tasks(self.store, self.tasks)
        self.store.update_state(fingerprint=identity.fingerprint, model_name=identity.name, dtype=identity.dtype)
        record_tasks(self.store, self.tasks)

    def check_artifacts(self, variants: Sequence[VariantRef]) -> None:
        """Refuse to continue a run whose ``ckpt:`` artifact changed on disk: a variant, like the baseline, is keyed
        by its bytes, not its path (pairs half from the old file and half from the new would be meaningless)."""
        from evalsuite.variants.artifact import artifact_fingerprint

        stored = self.store.state().artifact_fingerprints
        now = {v.name: artifact_fingerprint(path) for v in variants if (path := getattr(v, "artifact", None))}
        for name, fp in now.items():
            if stored.get(name, fp) != fp:
                raise StoreMismatch(f"artifact of variant {name!r} changed ({stored[name]} stored, {fp} now): "
                                    "start a new run")
        if now:
            self.store.update_state(artifact_fingerprints={**stored, **now})

    def todo(self, name: str, task: PreparedTask) -> list[int]:
        """Indices of ``task``'s samples not yet stored for ``name``."""
        done = self.store.done_ids(name, task.name)
        return [i for i in self.window(task) if task.samples[i].id not in done]

    def reuse_baseline(self, name: str) -> None:
        """Import a matching stored baseline's samples, task by task (a mismatch is logged or, strict, raised)."""
        if self.baseline_source is None:
            return
        for task in self.tasks:
            if self.baseline_source.import_into(self.store, task, name, self.backend.settings()):
                self.log(f"{name}/{task.name}: reused stored baseline")

    def verify(self, variant: VariantRef, baseline: str, task: PreparedTask) -> None:
        """Verified answers (and their KLD, from the same pass) for the samples whose baseline answer can be
        verified (``run.verify``); what cannot be (sampling, rows without ids) is left to ``generate``."""
        why = self.backend.verifies(variant)
        if why or task.gen.temperature > 0 or task.gen.n != 1:
            return self.note_unverified(variant.name, task.name, why or "sampled or pass@k generations")
        base = {r.sample_id: r for r in self.store.samples(baseline, task.name) if r.stop}
        done = self.store.done_ids(variant.name, task.name)
        todo = [i for i in self.window(task) if task.samples[i].id not in done and task.samples[i].id in base]
        if not todo:
            return None
        rows = [base[task.samples[i].id] for i in todo]
        refs = [Reference(tuple(r.token_ids), r.stop) for r in rows]
        bar = tqdm(total=len(todo), desc=f"verify {variant.name} · {task.name}", disable=not self.progress,
                   leave=False)
        started, cost = time.monotonic(), self.spent.setdefault(task.name, [0.0, 0])
        tally = VerifyTally(self.store, variant.name, task.name)
        for got in self.backend.verify(variant, variant.name, task, todo, refs, [r.output for r in rows],
                                       self.config.batch_size):
            cost[0], cost[1] = cost[0] + time.monotonic() - started, cost[1] + len(got)
            started = time.monotonic()
            self.store.put_samples(s for s, _, _ in got)
            if self.config.kld:
                self.store.put_kld(k for _, k, _ in got)
            tally.add(v for _, _, v in got)
            bar.update(len(got))
            if self.out_of_time():
                break
        bar.close()
        tally.save()
        if self.config.verify_audit > 0 and not self.out_of_time():
            audit(self, variant, task, self.config.verify_audit)
        return None

    def note_unverified(self, name: str, task: str, why: str) -> None:
        """Log once per (variant, task) why its answers are regenerated, and keep the reason in the meta."""
        notes = self.store.state().unverified
        if notes.get(name, {}).get(task) != why:
            self.log(f"{name}/{task}: answers regenerated, not verified: {why}")
            notes.setdefault(name, {})[task] = why
            self.store.update_state(unverified=notes)

    def generate(self, variant: VariantRef, name: str, batch_size: int,
                 tasks: Sequence[PreparedTask] | None = None, decode: str = "generated") -> None:
        """Generate the samples still to do, storing each group as the backend completes it (``decode``: how the
        stored rows say they were obtained). Nothing starts past the deadline: rows that verification left when the
        budget ran out wait for a later run instead of being regenerated (a needle row prefills its whole prompt)."""
        for task in self.tasks if tasks is None else tasks:
            todo = self.todo(name, task)
            if not todo or self.out_of_time():
                continue
            bar = tqdm(total=len(todo), desc=f"{name} · {task.name}", disable=not self.progress, leave=False)
            started, cost = time.monotonic(), self.spent.setdefault(task.name, [0.0, 0])
            for rows in self.backend.generate(variant, name, task, todo, batch_size):
                cost[0], cost[1] = cost[0] + time.monotonic() - started, cost[1] + len(rows)
                started = time.monotonic()
                done = self.store.done_ids(name, task.name)  # a retried shard may repeat stored rows
                self.store.put_samples(dataclasses.replace(r, decode=decode) for r in rows
                                       if r.sample_id not in done)
                bar.update(len(rows))
                if self.out_of_time():
                    break  # what is stored stays; the rest of this round is not generated
            bar.close()

    def cost_per_sample(self, task: str) -> float | None:
        """Mean seconds one variant took to generate one sample of ``task`` in this process (None: not yet run)."""
        seconds, samples = self.spent.get(task, (0.0, 0))
        return seconds / samples if samples else None

    def kld(self, variant: VariantRef, name: str, baseline: str, batch_size: int,
            tasks: Sequence[PreparedTask] | None = None) -> None:
        """KLD of ``variant`` over the baseline's stored answers, for the samples not yet measured."""
        for task in self.tasks if tasks is None else tasks:
            base_out = {r.sample_id: r.output for r in self.store.samples(baseline, task.name)}
            done = self.store.kld_done(name, task.name)
            todo = [i for i in self.window(task) if task.samples[i].id not in done
                    and task.samples[i].id in base_out]
            if not todo:
                continue
            answers = [base_out[task.samples[i].id] for i in todo]
            bar = tqdm(total=len(todo), desc=f"KLD {name} · {task.name}", disable=not self.progress, leave=False)
            for rows in self.backend.kld(variant, name, task, todo, answers, batch_size):
                done = self.store.kld_done(name, task.name)
                self.store.put_kld(r for r in rows if r.sample_id not in done)
                bar.update(len(rows))
                if self.out_of_time():
                    break
            bar.close()

    def record_info(self, variant: VariantRef, name: str) -> None:
        """The backend's byte figures and speed probe; without a probe, the medians of the stored samples' TTFT /
        inter-token latency."""
        info = self.backend.info(variant, name)
        if info.speed_probe is not None:
            self.store.put_variant(info)
            return
        rows = self.store.samples(name)
        ttft = [r.ttft_s for r in rows if r.ttft_s is not None]
        itl = [r.itl_s for r in rows if r.itl_s is not None]
        self.store.put_variant(dataclasses.replace(info, ttft_s=statistics.median(ttft) if ttft else None,
                                                   itl_s=statistics.median(itl) if itl else None))

    def noise_floor(self, baseline: VariantRef) -> None:
        """The baseline again at another batch size: its flips and KLD are the floor of what noise does."""
        name = baseline.name + NOISE_SUFFIX
        other = 1 if self.config.batch_size > 1 else 4
        self.generate(baseline, name, other)
        if self.config.kld:
            self.kld(baseline, name, baseline.name, other)
        self.backend.release(baseline)
