"""The Runner: does the draws a plan makes (``look``), baseline first, then each variant, on identical samples;
each group stored as it completes. It plans nothing and holds no window or deadline: each draw brings its own
(``run.schedule.Chunk``); ``run.pipeline.drive`` owns the loop and ``run.rounds`` the plans.

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
from typing import Any, Callable, Sequence

from tqdm.auto import tqdm

from evalsuite.errors import StoreMismatch
from evalsuite.run.backend import Backend, ModelIdentity, VariantRef
from evalsuite.core.config import RunConfig
from evalsuite.run.prepare import PreparedTask
from evalsuite.run.schedule import Chunk, everything
from evalsuite.store.records import NOISE_SUFFIX, KLDResult, Reference
from evalsuite.store.sqlite import Store
from evalsuite.run.verified import VerifyTally, audit, note_unverified

#: KLD method code of rows copied from the baseline (``Runner.copy_baseline``)
SAME_AS_BASELINE = "identical-to-baseline (KL 0 exactly)"


@dataclass(frozen=True)
class Window:
    """What one pass may work on: each task's first ``upto`` samples (None: all drawn), and no new work after
    ``deadline`` (``time.monotonic()``; None: none)."""

    upto: int | None = None
    deadline: float | None = None

    def range(self, task: PreparedTask) -> range:
        """Indices of ``task``'s samples in the window."""
        return range(min(len(task.samples), len(task.samples) if self.upto is None else self.upto))

    def passed(self) -> bool:
        """Whether the deadline (a sequential run's wall-clock budget) has passed."""
        return self.deadline is not None and time.monotonic() > self.deadline

    def todo(self, done: set[str], task: PreparedTask) -> list[int]:
        """Indices of ``task``'s samples in the window whose id is not in ``done``."""
        return [i for i in self.range(task) if task.samples[i].id not in done]


#: one pass of a draw: (variant, task, seconds it took, new pairs it stored)
Spent = tuple[str, str, float, int]


@dataclass
class Runner:
    """Runs one RunConfig through one backend into one store: ``start``, then each draw a plan makes (``look``;
    ``evalsuite.run.pipeline.drive`` owns the loop), then ``end``."""

    config: RunConfig
    backend: Backend
    tasks: list[PreparedTask]
    store: Store
    progress: bool = True
    log: Callable[[str], None] = print
    baseline_source: Any = None  # evalsuite.run.baselines.BaselineSource, optional
    finished: set[str] = dataclasses.field(default_factory=set)  # variants recorded and released (``finish``)

    def run(self, variants: Sequence[VariantRef]) -> None:
        """A fixed run: every (variant, task) generated and scored, KLD for every non-baseline variant, in one
        draw of everything (``run.schedule.everything``, as ``run.rounds.Fixed`` plans it)."""
        self.start(variants)
        self.look(everything([t.name for t in self.tasks], [v.name for v in variants[1:]]), variants)
        self.end(variants)

    def start(self, variants: Sequence[VariantRef], build: bool = False) -> None:
        """Refuse a changed model, tasks or artifact; record the run; import what a stored baseline covers (not
        generated again). ``build``: build every variant before any task is timed (``copies_baseline`` builds a
        variant to compare it with the baseline), so that a variant's one-off build (quantizing its weights: ~1 s
        for w4g64 on 2 cores) is not counted in the seconds per pair of its first task (a sequential run, whose
        variants stay built across its draws)."""
        self.check_compatible(self.backend.load())
        self.check_artifacts(variants)
        baseline = variants[0]
        self.store.update_state(baseline=baseline.name, variant_order=[v.name for v in variants],
                                kld_method=self.backend.kld_method, settings=self.backend.settings())
        self.reuse_baseline(baseline.name)
        for variant in variants[1:] if build else ():
            self.copies_baseline(variant)

    def look(self, chunk: Chunk, variants: Sequence[VariantRef]) -> list[Spent]:
        """One draw: each of ``chunk.tasks`` drawn up to ``chunk.target`` samples of its stream (the new samples'
        answers taken from a stored baseline where it has them), then the baseline and each variant of the chunk,
        one after another, answer the tasks' first ``chunk.upto`` samples: every variant pairs what the baseline
        answered (it answers nothing no variant pairs), and none, the baseline included, starts a batch past
        ``chunk.deadline`` (a chunk whose baseline answers were stored costs only the variants' passes, and a
        chunk priced from a few short rows can cost several times that: the budget holds anyway).
        ``chunk.last``: each is finished after its pass (one variant built at a time). Returns each pass's
        (variant, task, seconds, new pairs)."""
        tasks, base = [t for t in self.tasks if t.name in chunk.tasks], variants[0]
        for task in tasks:
            if chunk.target is not None and chunk.target > len(task.samples):
                task.draw(chunk.target - len(task.samples))
                if self.baseline_source is not None:
                    self.baseline_source.import_into(self.store, task, base.name, self.backend.settings(), quiet=True)
        spent: list[Spent] = []
        if chunk.upto == 0:
            return spent
        for variant in [base] + [v for v in variants[1:] if v.name in chunk.variants]:
            window = Window(chunk.upto, chunk.deadline)
            for task in tasks:
                before, t0 = len(self.store.done_ids(variant.name, task.name)), time.monotonic()
                self.answer(variants, variant, task, window)
                pairs = len(self.store.done_ids(variant.name, task.name)) - before
                spent.append((variant.name, task.name, time.monotonic() - t0, pairs))
            if chunk.last:
                self.finish(variant)
        return spent

    def end(self, variants: Sequence[VariantRef], deadline: float | None = None) -> None:
        """Finish every variant not finished yet; then the noise floor, when asked: the baseline again at another
        batch size (nothing started past ``deadline``), whose flips and KLD are the floor of what noise does."""
        for variant in variants:
            if variant.name not in self.finished:
                self.finish(variant)
        if not self.config.noise_floor:
            return
        baseline = variants[0]
        name, other = baseline.name + NOISE_SUFFIX, 1 if self.config.batch_size > 1 else 4
        self.generate(baseline, name, other, window=Window(deadline=deadline))
        if self.config.kld:
            self.kld(baseline, name, baseline.name, other, window=Window(deadline=deadline))
        self.backend.release(baseline)

    def answer(self, variants: Sequence[VariantRef], variant: VariantRef, task: PreparedTask,
               window: Window) -> None:
        """The baseline's answers to ``task``'s samples in ``window`` still to do; then, for another ``variant``,
        its own: copied where it computes what the baseline computes, else verified where they can be, generated,
        and their KLD."""
        baseline = variants[0]
        for v in [baseline] + ([variant] if variant is not baseline else []):
            if window.passed():
                continue
            if v is not baseline and self.copies_baseline(v):
                self.copy_baseline(baseline.name, v.name, task, window)
                continue
            if v is not baseline and self.config.verify:
                self.verify(v, baseline.name, task, window)
            self.generate(v, v.name, self.config.batch_size, [task],
                          "regenerated" if v is not baseline and self.config.verify else "generated", window)
            if v is not baseline and self.config.kld and not window.passed():
                self.kld(v, v.name, baseline.name, max(1, self.config.batch_size // 2), [task], window)

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

    def copy_baseline(self, baseline: str, name: str, task: PreparedTask, window: Window = Window()) -> None:
        """Store the baseline's answers to ``task``'s samples in ``window`` as ``name``'s, with KLD 0 on every
        answer token."""
        ids = {task.samples[i].id for i in window.range(task)}
        done, kld_done = self.store.done_ids(name, task.name), self.store.kld_done(name, task.name)
        rows = [r for r in self.store.samples(baseline, task.name) if r.sample_id in ids]
        self.store.put_samples(dataclasses.replace(r, variant=name) for r in rows if r.sample_id not in done)
        if self.config.kld:
            self.store.put_kld(KLDResult(name, task.name, r.sample_id, (0.0,) * max(1, r.n_tokens),
                                         max(1, r.n_tokens), max(1, r.n_tokens), SAME_AS_BASELINE)
                               for r in rows if r.sample_id not in kld_done)

    def finish(self, variant: VariantRef) -> None:
        """Record the variant's bytes and speed probe (without a probe, the medians of its stored samples' TTFT and
        inter-token latency), then free it."""
        info = self.backend.info(variant, variant.name)
        if info.speed_probe is None:
            rows = self.store.samples(variant.name)
            ttft = [r.ttft_s for r in rows if r.ttft_s is not None]
            itl = [r.itl_s for r in rows if r.itl_s is not None]
            info = dataclasses.replace(info, ttft_s=statistics.median(ttft) if ttft else None,
                                       itl_s=statistics.median(itl) if itl else None)
        self.store.put_variant(info)
        self.finished.add(variant.name)
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

    def reuse_baseline(self, name: str) -> None:
        """Import a matching stored baseline's samples, task by task (a mismatch is logged or, strict, raised)."""
        if self.baseline_source is None:
            return
        for task in self.tasks:
            if self.baseline_source.import_into(self.store, task, name, self.backend.settings()):
                self.log(f"{name}/{task.name}: reused stored baseline")

    def verify(self, variant: VariantRef, baseline: str, task: PreparedTask, window: Window = Window()) -> None:
        """Verified answers (and their KLD, from the same pass) for the samples in ``window`` whose baseline answer
        can be verified (``run.verify``); what cannot be (sampling, rows without ids) is left to ``generate``."""
        why = self.backend.verifies(variant)
        if why or task.gen.temperature > 0 or task.gen.n != 1:
            return note_unverified(self.store, self.log, variant.name, task.name, why or "sampled or pass@k generations")
        base = {r.sample_id: r for r in self.store.samples(baseline, task.name) if r.stop}
        todo = [i for i in window.todo(self.store.done_ids(variant.name, task.name), task)
                if task.samples[i].id in base]
        if not todo:
            return None
        rows = [base[task.samples[i].id] for i in todo]
        refs = [Reference(tuple(r.token_ids), r.stop) for r in rows]
        bar = tqdm(total=len(todo), desc=f"verify {variant.name} · {task.name}", disable=not self.progress,
                   leave=False)
        tally = VerifyTally(self.store, variant.name, task.name)
        for got in self.backend.verify(variant, variant.name, task, todo, refs, [r.output for r in rows],
                                       self.config.batch_size):
            self.store.put_samples(s for s, _, _ in got)
            if self.config.kld:
                self.store.put_kld(k for _, k, _ in got)
            tally.add(v for _, _, v in got)
            bar.update(len(got))
            if window.passed():
                break
        bar.close()
        tally.save()
        if self.config.verify_audit > 0 and not window.passed():
            audit(self, variant, task, self.config.verify_audit)
        return None

    def generate(self, variant: VariantRef, name: str, batch_size: int,
                 tasks: Sequence[PreparedTask] | None = None, decode: str = "generated",
                 window: Window = Window()) -> None:
        """Generate the samples in ``window`` still to do, storing each group as the backend completes it
        (``decode``: how the stored rows say they were obtained). Nothing starts past the window's deadline: rows
        that verification left when the budget ran out wait for a later run instead of being regenerated (a needle
        row prefills its whole prompt)."""
        for task in self.tasks if tasks is None else tasks:
            todo = window.todo(self.store.done_ids(name, task.name), task)
            if not todo or window.passed():
                continue
            bar = tqdm(total=len(todo), desc=f"{name} · {task.name}", disable=not self.progress, leave=False)
            for rows in self.backend.generate(variant, name, task, todo, batch_size):
                done = self.store.done_ids(name, task.name)  # a retried shard may repeat stored rows
                self.store.put_samples(dataclasses.replace(r, decode=decode) for r in rows
                                       if r.sample_id not in done)
                bar.update(len(rows))
                if window.passed():
                    break  # what is stored stays; the rest of this pass is not generated
            bar.close()

    def kld(self, variant: VariantRef, name: str, baseline: str, batch_size: int,
            tasks: Sequence[PreparedTask] | None = None, window: Window = Window()) -> None:
        """KLD of ``variant`` over the baseline's stored answers, for the samples in ``window`` not yet measured."""
        for task in self.tasks if tasks is None else tasks:
            base_out = {r.sample_id: r.output for r in self.store.samples(baseline, task.name)}
            todo = [i for i in window.todo(self.store.kld_done(name, task.name), task)
                    if task.samples[i].id in base_out]
            if not todo:
                continue
            answers = [base_out[task.samples[i].id] for i in todo]
            bar = tqdm(total=len(todo), desc=f"KLD {name} · {task.name}", disable=not self.progress, leave=False)
            for rows in self.backend.kld(variant, name, task, todo, answers, batch_size):
                done = self.store.kld_done(name, task.name)
                self.store.put_kld(r for r in rows if r.sample_id not in done)
                bar.update(len(rows))
                if window.passed():
                    break
            bar.close()
