"""`evalsuite compare` on inspect_ai logs written by inspect_ai itself with its offline mock model (skipped where
inspect_ai is not installed; its absence is tested in test_torch_free.py): epochs averaged per sample, slices from
sample metadata, the prompt-mismatch and one-sided rules."""
from __future__ import annotations

from pathlib import Path

import pytest

from evalsuite.store.sqlite import Store
from evalsuite.gate.store_gate import gate_store

pytest.importorskip("inspect_ai")

N = 6


def write_inspect_log(folder: Path, model: str, answers: list[str], system: str = "Be brief.", n: int = N,
                      epochs: int = 2) -> Path:
    """An inspect_ai eval of ``n`` sums ("What is i+1?", target i+1, metadata ctx) by ``mockllm/<model>``
    answering ``answers`` in call order, ``epochs`` epochs; returns the log file inspect wrote."""
    from inspect_ai import Task, eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, get_model
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate, system_message

    data = [Sample(input=f"What is {i}+1?", target=str(i + 1), id=f"q{i}", metadata={"ctx": 100 * (i % 3)})
            for i in range(n)]
    task = Task(name="sums", dataset=data, solver=[system_message(system), generate()], scorer=match())
    mock = get_model(f"mockllm/{model}", custom_outputs=[ModelOutput.from_content(model, a) for a in answers])
    (log,) = inspect_eval(task, model=mock, log_dir=str(folder), display="none", epochs=epochs)
    assert log.status == "success"
    return Path(log.location)


@pytest.fixture(scope="module")
def inspect_logs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("inspect_logs")
    right = [str(i + 1) for i in range(N)] * 2
    some_wrong = [str(i + 1) if i % 4 else "0" for i in range(2 * N)]
    return {"base": write_inspect_log(root / "base", "base", right),
            "q4": write_inspect_log(root / "q4", "q4", some_wrong),
            "q4_other_prompt": write_inspect_log(root / "other", "q4", some_wrong, system="Be very brief."),
            "q4_fewer": write_inspect_log(root / "fewer", "q4", some_wrong, n=N - 1)}


def epoch_means(path: Path) -> dict[str, float]:
    """Sample id -> the mean over epochs of inspect's own numeric value of its score, read by inspect."""
    from inspect_ai.log import read_eval_log
    from inspect_ai.scorer import value_to_float

    got: dict[str, list[float]] = {}
    for s in read_eval_log(str(path)).samples:
        got.setdefault(str(s.id), []).append(value_to_float()(s.scores["match"].value))
    return {k: sum(v) / len(v) for k, v in got.items()}


def test_epochs_are_averaged_per_sample_and_paired_by_id(inspect_logs, cli, tmp_path):
    code, out, err = cli("compare", inspect_logs["base"], inspect_logs["q4"].parent, "--slice-key", "ctx",
                         "--run-id", "i")
    assert code in (0, 1) and err == ""
    store = Store.open(tmp_path / "runs" / "i")
    state = store.state()
    assert state.variant_order == ["mockllm/base", "mockllm/q4"]  # the logs' model names
    for name, key in (("mockllm/base", "base"), ("mockllm/q4", "q4")):
        assert {r.sample_id: r.score for r in store.samples(name)} == epoch_means(inspect_logs[key])
    assert any("repeated generations averaged per document before pairing" in x for x in state.notes)
    stats = {s.slice: s for s in gate_store(store).stats}
    store.close()
    assert stats["all"].n == N and stats["all"].n_unpaired == 0
    assert {k: s.n for k, s in stats.items() if k.startswith("ctx=")} == {"ctx=0": 2, "ctx=100": 2, "ctx=200": 2}
    assert stats["all"].variant_mean < stats["all"].baseline_mean == 1.0


def test_another_system_prompt_is_refused_naming_the_first_sample(inspect_logs, cli, tmp_path):
    code, _, err = cli("compare", inspect_logs["base"], inspect_logs["q4_other_prompt"], "--run-id", "p")
    assert code == 2 and err.count("\n") == 1
    assert "mockllm/q4: task 'sums' doc q" in err and "its prompt differs from the baseline's" in err
    assert not (tmp_path / "runs" / "p").exists()


def test_a_sample_missing_from_the_variant_is_counted_and_named(inspect_logs, cli, tmp_path):
    code, out, _ = cli("compare", inspect_logs["base"], inspect_logs["q4_fewer"], "--run-id", "f")
    assert "mockllm/q4 · sums: 1 only in the baseline mockllm/base (doc q5)" in out
    store = Store.open(tmp_path / "runs" / "f")
    (row,) = [s for s in gate_store(store).stats if s.slice == "all"]
    store.close()
    assert (row.n, row.n_unpaired) == (N - 1, 1)
