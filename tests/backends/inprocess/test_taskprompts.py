"""engine.taskprompts: prompts rendered once per task, the shared prefix recomputed when a round adds samples."""
from dataclasses import replace

from evalsuite.backends.inprocess.generate import encode_prompts, shared_prefix_len
from evalsuite.backends.inprocess.taskprompts import TaskPrompts
from evalsuite.run.prompts import render_prompt
from tests.conftest import prepared


def test_prompts_prefix_and_keys_follow_the_tasks_samples(tokenizer):
    calls = []
    prompts = TaskPrompts(lambda: calls.append(1) or tokenizer)
    assert not calls  # nothing is asked of the tokenizer before a task is
    task = prepared(n=6)[0]
    s0 = task.samples[0]
    msgs = s0.messages[:-1] + ({**s0.messages[-1], "content": s0.messages[-1]["content"] + " and more"},)
    twin = replace(task.samples[1], messages=msgs)  # shares all of sample 0's last message
    first = replace(task, samples=[task.samples[0], twin])
    assert prompts.of(first)[0] == render_prompt(first.samples[0], tokenizer)
    alone = prompts.prefix_len(first)
    assert alone == shared_prefix_len(tokenizer, prompts.of(first)) > 0
    # a round added samples: the prompts are rendered again and the prefix shrinks to what all of them share
    assert len(prompts.of(task)) == 6
    assert prompts.prefix_len(task) == shared_prefix_len(tokenizer, prompts.of(task)) < alone
    assert prompts.keys(task, [4, 1]) == [tuple(x) for x in encode_prompts(tokenizer, [prompts.of(task)[i]
                                                                                       for i in (4, 1)])]
    text, special = prompts.of(task)[2]
    assert prompts.count_tokens(task.samples[2]) == len(tokenizer(text, add_special_tokens=special)["input_ids"])
