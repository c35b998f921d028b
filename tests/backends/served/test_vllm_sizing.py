"""vLLM server command lines sized for the GPUs (``backends.served.vllm.memory``, ``backends.served.vllm.pool``):
context, memory shares, tensor parallelism, one-at-a-time (sleep mode), the user's engine arguments. No server is
started: model folders hold a config.json and a safetensors header (the tensors' shapes, no data)."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from evalsuite.errors import EvalsuiteError
from evalsuite.backends.served.vllm.memory import GIB, SHARE_CAP, Device, check_windows, context_needed, plan_memory
from evalsuite.backends.served.vllm.pool import EngineOptions, ServerPool
from evalsuite.backends.served.vllm.sizes import model_window, server_need
from evalsuite.backends.served.vllm.specs import flag_values, parse_served

CONFIGS = Path(__file__).parents[2] / "data" / "configs"
#: a variant that vLLM serves on every CPU (no FP8 KV, no FP8 weights)
EAGER = 'vllm:"--enforce-eager"#eager'


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> None:
    """A header-only .safetensors: name -> (dtype, shape, bytes)."""
    header, offset = {}, 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def _model(folder: Path, config: str, int4: bool = False, **override: object) -> str:
    """A folder shaped like ``config`` (embeddings, head and one tensor for every layer's parameters)."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {**json.loads((CONFIGS / config).read_text()), **override}
    (folder / "config.json").write_text(json.dumps(cfg))
    h, v, layers, inter = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    kv = cfg["num_key_value_heads"] * (cfg.get("head_dim") or h // cfg["num_attention_heads"])
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * inter
    body = ("I32", [layers * per_layer // 8], layers * per_layer // 2) if int4 else \
        ("BF16", [layers * per_layer], 2 * layers * per_layer)
    _safetensors(folder / "model.safetensors", {"model.embed_tokens.weight": ("BF16", [v, h], 2 * v * h),
                                                "lm_head.weight": ("BF16", [v, h], 2 * v * h),
                                                "model.layers.mlp.down_proj.weight": body})
    return str(folder)


def _servers(specs, context: int, devices, options: EngineOptions = EngineOptions()):
    """(plan, {name: command line}) as ``VllmBackend.load`` builds them."""
    plan = plan_memory([server_need(s) for s in specs], context, devices, options.tensor_parallel_size)
    pool = ServerPool("/py", Path("/run"), plan, options)
    return plan, {s.name: pool.server(s).command() for s in specs}


def _flag(cmd: list[str], name: str) -> str:
    return flag_values(cmd, name)[-1]


H100 = Device(free=80 * GIB, total=80 * GIB)


def test_7b_baseline_and_three_variants_share_one_80gib_gpu(tmp_path: Path) -> None:
    """A 7B baseline, vLLM's FP8 KV cache, FP8 weights and an INT4 checkpoint at a 32k needle: side by side, the
    shares sum to at most 0.92 and each covers its weights plus one sequence's KV cache at the longest context."""
    base = _model(tmp_path / "qwen", "qwen2.5-7b.json")
    art = _model(tmp_path / "qwen-w4a16", "qwen2.5-7b.json", int4=True)
    specs = [parse_served(t, base) for t in ("bf16", "vkvf8", "wf8", f"ckpt:{art}#w4a16")]
    context = context_needed([("needle", 32_500, 64), ("json", 900, 192)])
    assert context == 32_768  # 32,564 rounded up to whole blocks of 256; the window (32,768) is not exceeded
    plan, cmds = _servers(specs, context, [H100])
    assert not plan.one_at_a_time
    shares = {n: float(_flag(c, "--gpu-memory-utilization")) for n, c in cmds.items()}
    assert sum(shares.values()) <= SHARE_CAP
    for spec in specs:
        need = server_need(spec)
        assert shares[spec.name] * 80 * GIB >= need.weight_bytes + need.kv_bytes_per_token * context
        cmd = cmds[spec.name]
        assert _flag(cmd, "--max-model-len") == "32768" and "--enable-sleep-mode" not in cmd
        assert "--tensor-parallel-size" not in cmd and cmd[-len(spec.flags):] == list(spec.flags) or not spec.flags
    assert shares["bf16"] > shares["vkvf8"] > shares["w4a16"]  # bf16 KV at 32k is twice the FP8 one
    assert server_need(specs[1]).kv_bytes_per_token == 28 * 2 * 4 * 128  # FP8: one byte per value


def test_two_gpus_tensor_parallel(tmp_path: Path) -> None:
    """Every server spans both GPUs: weights and KV cache are halved per GPU, so four 8B servers at 128k run side
    by side, where on one GPU they must take turns."""
    base = _model(tmp_path / "llama", "llama3-8b.json", max_position_embeddings=131_072)
    specs = [parse_served(t, base) for t in ("bf16", "vkvf8", 'vllm:"--enforce-eager"#eager', "wf8")]
    two = [H100, H100]
    plan, cmds = _servers(specs, 131_072, two, EngineOptions.parse(2, ["--max-num-seqs 8"]))
    assert not plan.one_at_a_time and plan.tp == 2
    for spec in specs:
        cmd = cmds[spec.name]
        assert _flag(cmd, "--tensor-parallel-size") == "2" and _flag(cmd, "--max-num-seqs") == "8"
        need = server_need(spec)
        share = float(_flag(cmd, "--gpu-memory-utilization"))
        assert share * 80 * GIB >= (need.weight_bytes + need.kv_bytes_per_token * 131_072) / 2
    assert sum(float(_flag(c, "--gpu-memory-utilization")) for c in cmds.values()) <= SHARE_CAP
    assert _servers(specs, 131_072, [H100])[0].one_at_a_time
    with pytest.raises(EvalsuiteError, match="needs 2 GPUs"):
        _servers(specs, 131_072, [H100], EngineOptions.parse(2, []))


def test_servers_that_do_not_fit_together_run_one_at_a_time(tmp_path: Path) -> None:
    """Three 8B servers at 128k with a bf16 KV cache (16 GiB per sequence, ~35 GiB a server) do not fit one
    80 GiB GPU together: each gets the GPU but what the sleeping ones keep, in vLLM's sleep mode."""
    base = _model(tmp_path / "llama", "llama3-8b.json", max_position_embeddings=131_072)
    specs = [parse_served(t, base) for t in ("bf16", 'vllm:"--enforce-eager"#eager', 'vllm:"--block-size 32"#b32')]
    plan, cmds = _servers(specs, 131_072, [H100])
    assert plan.one_at_a_time
    for spec in specs:
        cmd = cmds[spec.name]
        need = server_need(spec)
        share = float(_flag(cmd, "--gpu-memory-utilization"))
        assert "--enable-sleep-mode" in cmd and share <= SHARE_CAP
        assert share * 80 * GIB >= need.weight_bytes + need.kv_bytes_per_token * 131_072
    assert "--enable-sleep-mode" not in _servers(specs, 8192, [H100])[1]["bf16"]  # at 8k they share the GPU


def test_what_other_processes_hold_counts(tmp_path: Path) -> None:
    base = _model(tmp_path / "llama", "llama3-8b.json")
    specs = [parse_served(t, base) for t in ("bf16", "vkvf8")]
    assert not _servers(specs, 8192, [H100])[0].one_at_a_time
    busy = Device(free=45 * GIB, total=80 * GIB)  # someone else holds 35 GiB
    plan, cmds = _servers(specs, 8192, [busy])
    assert plan.one_at_a_time and all(float(_flag(c, "--gpu-memory-utilization")) * 80 < 45 for c in cmds.values())


def test_the_users_engine_arguments(tmp_path: Path) -> None:
    """--vllm-arg reaches every server after evalsuite's flags (the variant's own flags last); a share or context
    the user gives replaces the computed one; evalsuite's own flags are refused."""
    base = _model(tmp_path / "llama", "llama3-8b.json")
    specs = [parse_served(t, base) for t in ("bf16", "vkvf8")]
    options = EngineOptions.parse(None, ["--enforce-eager", "--gpu-memory-utilization=0.4 --max-model-len 2048"])
    plan = plan_memory([server_need(s) for s in specs], 8192, [H100], share=0.4)
    cmd = ServerPool("/py", tmp_path, plan, options).server(specs[1]).command()
    assert cmd.count("--enforce-eager") == 1 and "--max-model-len" not in cmd[:cmd.index("--enforce-eager")]
    assert "--gpu-memory-utilization=0.4" in cmd and cmd[-2:] == ["--kv-cache-dtype", "fp8"]
    assert EngineOptions.parse(None, ["--tensor-parallel-size 4"]).tensor_parallel_size == 4
    assert EngineOptions.parse(2, ["--tensor-parallel-size=4"]).tensor_parallel_size == 2
    with pytest.raises(EvalsuiteError, match="--port"):
        EngineOptions.parse(None, ["--port 9000"])


def test_cpu_servers_get_their_context_and_kv_space(tmp_path: Path) -> None:
    base = _model(tmp_path / "smol", "smollm2-135m.json")
    specs = [parse_served(t, base) for t in ("bf16", "vkvf8")]
    plan = plan_memory([server_need(s) for s in specs], 16_384, None)
    server = ServerPool("/py", tmp_path, plan).server(specs[0])
    assert _flag(server.command(), "--max-model-len") == "8192"  # capped by the model's window
    assert "--gpu-memory-utilization" not in server.command() and server.env["VLLM_CPU_KVCACHE_SPACE"] == "2"


def test_a_task_longer_than_the_window_is_refused_before_any_server(tmp_path: Path) -> None:
    base = _model(tmp_path / "smol", "smollm2-135m.json")
    needs = [server_need(parse_served("bf16", base))]
    check_windows([("needle", 8000, 64)], needs)
    with pytest.raises(EvalsuiteError) as exc:
        check_windows([("needle", 8190, 64)], needs)
    assert "needle" in str(exc.value) and "8192-token window" in str(exc.value) and "\n" not in str(exc.value)


def test_model_window_follows_rope_scaling_and_the_tokenizer(tmp_path: Path) -> None:
    folder = Path(_model(tmp_path / "smol", "smollm2-135m.json"))
    assert model_window(folder) == 8192
    cfg = {k: v for k, v in json.loads((folder / "config.json").read_text()).items() if k != "rope_parameters"}
    (folder / "config.json").write_text(json.dumps({**cfg, "rope_scaling": {"type": "linear", "factor": 2.0}}))
    assert model_window(folder) == 16384  # a config written before transformers 5
    (folder / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 16384, "rope_parameters": {
        "rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8192, "rope_theta": 1e5}}))
    assert model_window(folder) == 16384  # YaRN: the window is already scaled
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 8192}))
    assert model_window(folder) == 8192
    shutil.rmtree(folder)


def test_cli_refuses_a_task_longer_than_the_window_before_any_server(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ``evalsuite run --engine vllm``: the tasks are prepared and measured first, and a task that needs
    more than the served model's window is one line (exit 2); no server was started (a stand-in interpreter
    answers vLLM's version probe and nothing else). The variant is one every CPU's vLLM serves (an FP8 KV cache would
    be refused first on an AVX2-only CPU, before the window is looked at)."""
    from click.testing import CliRunner

    from evalsuite.cli import cli

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 0.32.0 cpu\n")
    fake.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["run", "--engine", "vllm", "--vllm-python", str(fake), "--variants", EAGER,
                                   "--tasks", "reasoning", "--limit", "2", "--param", "reasoning.max_new_tokens=9000",
                                   "--no-gate", "-q"], standalone_mode=False)
    assert isinstance(res.exception, EvalsuiteError) and res.exception.exit_code == 2, res.output
    msg = str(res.exception)
    assert "reasoning" in msg and "9000 answer tokens" in msg and "8192-token window" in msg and "\n" not in msg
    assert not list(tmp_path.glob("runs/*/servers"))


def test_vllm_options_need_the_vllm_engine_and_a_resume_keeps_them(tmp_path: Path) -> None:
    from evalsuite.core.config import RunConfig
    from evalsuite.backends.served.vllm.cli import engine_backend

    config = RunConfig(variants=["bf16"], tasks=["reasoning"])
    with pytest.raises(EvalsuiteError, match="--engine vllm"):
        engine_backend(config, tmp_path, None, None, False, tensor_parallel_size=2)
    (tmp_path / "served.json").write_text(json.dumps({"engine": "vllm", "python": "/py", "options": {
        "tensor_parallel_size": 2, "args": ["--enforce-eager"]}}))
    backend = engine_backend(config, tmp_path, None, None, True)
    assert backend.options == EngineOptions(2, ("--enforce-eager",)) and backend.python == "/py"
    assert engine_backend(config, tmp_path, None, None, True, tensor_parallel_size=4).options.tensor_parallel_size == 4


def test_the_plan_says_what_it_chose(tmp_path: Path) -> None:
    base = _model(tmp_path / "llama", "llama3-8b.json")
    specs = [parse_served(t, base) for t in ("bf16", "vkvf8")]
    gpu = _servers(specs, 8192, [H100])[0].describe()
    assert gpu.startswith("vLLM servers on 1 x 80.00 GiB GPU, side by side: max-model-len 8192; shares bf16 0.")
    cpu = plan_memory([server_need(s) for s in specs], 8192, None).describe()
    assert cpu == "vLLM servers on CPU, side by side: max-model-len 8192; servers bf16, vkvf8"
