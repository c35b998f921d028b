"""`evalsuite tenants RUN` on a stored run (no model): the table and its lines, --json the same, exit 0 / 1 / 2; the
gate's end and the report carry the tenants a run was run with."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evalsuite.cli.tenants_cmd import tenants as tenants_cmd
from evalsuite.core.config import RunConfig
from evalsuite.store.records import SampleResult, VariantInfo
from evalsuite.store.sqlite import Store
from evalsuite.capacity import load_config, shape_from_config, weight_breakdown
from evalsuite.variants.spec import parse_variant

CONFIG = load_config(Path(__file__).parents[1] / "data" / "configs" / "smollm2-135m.json")
LENIENT = {"defaults": {"min_samples": 1, "max_drop": 0.5, "max_flip_rate": 0.5, "max_kld": None}}
CHAT = {"context": 256, "concurrency": 64, "gpu_memory": "1GiB", "reserve": "0%", "runtime": "vllm",
        "objective": "requests_per_gpu", "policy": LENIENT}
TINY = {**CHAT, "gpu_memory": "100MB", "runtime": "transformers"}  # bf16 weights alone are 269 MB


def stored_run(tmp_path: Path) -> Path:
    """bf16, w4g64 and kv4g32 answering as the baseline does, w2g32 wrong everywhere; measured bytes as the
    planner's formula gives them for SmolLM2-135M."""
    names = ["bf16", "w4g64", "kv4g32", "w2g32"]
    store = Store.create(tmp_path / "r", RunConfig(model="x", variants=names, tasks=["json"]).to_dict())
    shape = shape_from_config(CONFIG)
    for spec in names:
        v = parse_variant(spec)
        store.put_samples(SampleResult(v.name, "json", "1", f"s{i}", f"h{i}", "x",
                                       0.0 if spec == "w2g32" else float(i % 4 != 0)) for i in range(40))
        wb = weight_breakdown(shape, v.weights).total
        store.put_variant(VariantInfo(v.name, v.to_dict(), wb, wb))
    store.update_state(model_config=CONFIG, finished=1.0)
    return tmp_path / "r"


def write(tmp_path: Path, **tenants: dict) -> str:
    path = tmp_path / "tenants.yaml"
    path.write_text(yaml.safe_dump({"tenants": tenants}))
    return str(path)


def test_table_lines_json_and_exit_codes(tmp_path):
    run, cli = str(stored_run(tmp_path)), CliRunner()
    res = cli.invoke(tenants_cmd, [run, "--tenants", write(tmp_path, chat=CHAT)], standalone_mode=False)
    assert res.exception is None and res.return_value == 0, res.output
    out = res.output
    assert "chat    vllm     w4g64    PASS     162.0    1 of 1  1.31× predicted" in out and "tenants: exit 0" in out
    assert "chat: not kv4g32r128 (runtime): vllm serves no evalsuite kv4g32r128 KV cache" in out
    assert "chat: not w2g32 (quality): FAIL json: Δ=-0.750" in out
    assert "chat: note: w4g64 is an in-process emulation of int4 g64 weights: gate the artifact (`ckpt:`)" in out
    assert all(len(line) < 240 for line in out.splitlines())  # one short line each
    res = cli.invoke(tenants_cmd, [run, "--tenants", write(tmp_path, chat=CHAT, tiny=TINY), "--json"],
                     standalone_mode=False)
    data = json.loads(res.output)
    assert res.return_value == 1 and data["exit_code"] == 1
    tiny = data["decisions"][1]
    assert tiny["status"] == "nothing" and tiny["variant"] is None
    assert tiny["why_none"] == ("nothing serves this tenant: variants ruled out by fit 3; the baseline does not "
                                "fit: weights 256.57 MiB + one 256-token request 5.62 MiB need 3 GPUs of 95.37 MiB "
                                "usable; has 1")
    assert {r["variant"]: r["stage"] for r in tiny["rejected"]} == {"w4g64": "fit", "kv4g32r128": "fit",
                                                                    "w2g32": "fit"}


def test_a_bad_tenants_file_is_refused_before_the_run_is_read(tmp_path):
    bad = write(tmp_path, chat={**CHAT, "cost": "weight_bytes"})
    res = CliRunner().invoke(tenants_cmd, [str(tmp_path / "no-such-run"), "--tenants", bad], standalone_mode=False)
    assert "the cost:/preference: form" in str(res.exception) and "\n" not in str(res.exception)
    assert getattr(res.exception, "exit_code", None) == 2


def test_a_run_without_tenants_or_config_says_what_to_give(tmp_path):
    run = stored_run(tmp_path)
    res = CliRunner().invoke(tenants_cmd, [str(run)], standalone_mode=False)
    assert "was not run with --tenants: give --tenants FILE" in str(res.exception)
    Store.open(run).update_state(model_config={})
    res = CliRunner().invoke(tenants_cmd, [str(run), "--tenants", write(tmp_path, chat=CHAT)], standalone_mode=False)
    assert "cannot find its model's config.json" in str(res.exception)
    res = CliRunner().invoke(tenants_cmd, [str(run), "--tenants", write(tmp_path, chat=CHAT), "--model-config",
                                           str(Path(__file__).parents[1] / "data" / "configs")], standalone_mode=False)
    assert "model config not found" in str(res.exception)


def test_gate_and_report_carry_the_stored_tenants(tmp_path, monkeypatch):
    from evalsuite.cli.finish import gate_and_report
    from evalsuite.tenants.spec import load_tenants, stored

    run = stored_run(tmp_path)
    path = write(tmp_path, chat=CHAT, tiny=TINY)
    store = Store.open(run)
    store.update_state(tenants=stored(load_tenants(path), path))
    lines: list[str] = []
    reports = tmp_path / "reports"
    monkeypatch.setenv("EVALSUITE_REPORTS", str(reports))
    gate_and_report(store, None, echo=lines.append)
    text = "\n".join(lines)
    assert "tenants: exit 1" in text and "tiny: nothing serves this tenant" in text
    summary = next(reports.rglob("summary.md")).read_text()
    assert "## Tenants" in summary and "| chat | vllm | w4g64 | PASS |" in summary
    results = json.loads(next(reports.rglob("results.json")).read_text())
    assert [d["tenant"] for d in results["tenants"]["decisions"]] == ["chat", "tiny"]
    html = next(reports.rglob("index.html")).read_text()
    assert 'id="tenants"' in html and 'data-tenant="tiny"' in html


@pytest.mark.parametrize("runtime, chosen", [("vllm", "w4g64"), ("transformers", "w4g64+kv4g32r128"),
                                             ("any", "w4g64+kv4g32r128")])
def test_only_a_vllm_tenant_is_kept_from_evalsuites_kv(tmp_path, runtime, chosen):
    run = stored_run(tmp_path)
    store = Store.open(run)
    v = parse_variant("w4g64+kv4g32")
    store.put_samples(SampleResult(v.name, "json", "1", f"s{i}", f"h{i}", "x", float(i % 4 != 0)) for i in range(40))
    wb = weight_breakdown(shape_from_config(CONFIG), v.weights).total
    store.put_variant(VariantInfo(v.name, v.to_dict(), wb, wb))
    res = CliRunner().invoke(tenants_cmd, [str(run), "--tenants", write(tmp_path, t={**CHAT, "runtime": runtime}),
                                           "--json"], standalone_mode=False)
    assert json.loads(res.output)["decisions"][0]["variant"] == chosen


def test_run_refuses_a_bad_tenants_file_before_the_model_or_server(tmp_path):
    from tests.cli.test_exit_codes import _cli

    bad = write(tmp_path, chat={**CHAT, "preference": ["w4g64"]})
    res = _cli("run", "--model", "openai:http://127.0.0.1:9/v1#x", "--tenants", bad, "--tasks", "json",
               "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert res.returncode == 2 and "the cost:/preference: form" in res.stderr and "unreachable" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()
