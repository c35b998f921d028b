"""Batches for teacher-forced passes: every row once, within the limits, padding less than one sorted cut."""
from __future__ import annotations

import random

import pytest
import torch

from evalsuite.backends.inprocess.decoder import plan_batches
from evalsuite.backends.inprocess.forced import plan_passes
from evalsuite.backends.inprocess.kld import BaselineLogprobCache


def padded(batches, prompts, answers, prefill):
    """Token slots the passes pad to: per batch, its rows x (longest prompt if prefilled + longest answer)."""
    return sum(len(b) * ((max(prompts[i] for i in b) if prefill else 0) + max(answers[i] for i in b))
               for b in batches)


@pytest.mark.parametrize("prefill", [False, True])
def test_every_row_goes_once_within_the_row_and_token_limits(prefill):
    rng = random.Random(3)
    prompts = [rng.randint(20, 2000) for _ in range(90)]
    answers = [rng.randint(1, 300) for _ in range(90)]
    batches = plan_passes(prompts, answers, prefill, max_batch=16, max_tokens=12000)
    assert sorted(i for b in batches for i in b) == list(range(90))
    for b in batches:
        assert len(b) <= 16
        assert len(b) == 1 or len(b) * max(prompts[i] + answers[i] for i in b) <= 12000


def test_answers_of_spread_lengths_are_cut_where_one_sorted_batch_pads_them():
    """JSON-like rows (prompts ~200 tokens from a snapshot, answers 10-190): cut by answer length, the passes pad
    far fewer slots than the prompt + answer sorted cut, which holds all 32 rows in one batch."""
    rng = random.Random(5)
    prompts = [rng.randint(180, 260) for _ in range(32)]
    answers = [rng.randint(10, 190) for _ in range(32)]
    ours = plan_passes(prompts, answers, False, 32, 24576)
    old = plan_batches([p + a for p, a in zip(prompts, answers)], 32, 24576)
    assert len(old) == 1 and len(ours) > 1
    assert padded(ours, prompts, answers, False) < 0.7 * padded(old, prompts, answers, False)


def test_prefilled_prompts_are_grouped_by_length():
    """Needle-like rows (prompts 512-2048 prefilled, short answers): each batch's prompts lie close together."""
    prompts = [512 + 96 * i for i in range(16)]
    answers = [40] * 16
    batches = plan_passes(prompts, answers, True, 32, 24576)
    assert len(batches) > 2
    assert all(max(prompts[i] for i in b) <= 1.5 * min(prompts[i] for i in b) for b in batches)
    assert padded(batches, prompts, answers, True) < padded([list(range(16))], prompts, answers, True)


def test_the_baselines_rows_are_computed_once_whatever_the_batches():
    """Per-row keys: a second variant batched differently asks only for the rows no batch gave yet."""
    cache, asked = BaselineLogprobCache(), []

    def compute(keys):
        def rows(missing):
            asked.extend(keys[j] for j in missing)
            return [torch.full((2, 3), float(keys[j])) for j in missing]
        return rows

    first = cache.get_each([1, 2, 3], compute([1, 2, 3]))
    second = cache.get_each([3, 4, 1], compute([3, 4, 1]))
    assert asked == [1, 2, 3, 4]
    assert [float(r[0, 0]) for r in first + second] == [1, 2, 3, 3, 4, 1]
    small = BaselineLogprobCache(max_bytes=0)  # nothing kept: every row computed, still given back in order
    assert [float(r[0, 0]) for r in small.get_each([7, 8], compute([7, 8]))] == [7, 8] and small.used == 0
