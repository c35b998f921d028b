#!/usr/bin/env bash
# The GPU check (issue 63 item 6; docs/gpu-gate.md): evalsuite's CUDA paths end to end on one GPU, from a bare
# machine with the checkout and the GPU bundle (`make gpu-bundle`: wheels and a model, .cache/gpu-bundle, 64 MiB
# with the checkout). Steps, their timeouts and what each checks: benchmarks/gpu/gpu_gate.py. The bundle's wheels are
# installed offline into /tmp/site; evalsuite is imported from this working tree.
#
#   bash benchmarks/gpu/gpu_gate.sh --dry-run            # the bundle's size and the steps that would run; runs nothing
#   bash benchmarks/gpu/gpu_gate.sh                      # on a CUDA machine: every step (vllm only where vLLM is found)
#   bash benchmarks/gpu/gpu_gate.sh --steps env,model,in-process
#   bash benchmarks/gpu/gpu_gate.sh --tiny               # the CPU: a few samples, short needles (tests run it)
#   bash benchmarks/gpu/gpu_gate.sh --vllm-python PATH   # asks for the vllm step with vLLM's Python
#
# With $OUT set, the log and the table are written there too (gpu_gate.log, gpu_gate.md, gpu_decode.md).
# Exit status: 0 when every step asked for ran and passed (a FAIL verdict is a result, not a failure); 1 otherwise,
# a step skipped for a missing package or device included.
set -uo pipefail
cd "$(dirname "$0")/../.."

for arg in "$@"; do
  if [[ "$arg" == "--dry-run" ]]; then  # nothing installed, nothing run
    [[ -n "${PYTHON:-}" ]] || { [[ -x .venv/bin/python ]] && PYTHON=.venv/bin/python || PYTHON=python3; }
    exec "$PYTHON" -m benchmarks.gpu.gpu_gate "$@"
  fi
done
LOG=/dev/null
if [[ -n "${OUT:-}" ]]; then mkdir -p "$OUT"; LOG="$OUT/gpu_gate.log"; fi
exec > >(tee "$LOG") 2>&1

source benchmarks/gpu/gpu_env.sh  # $PYTHON, the bundle's wheels, PYTHONPATH, offline hub
"$PYTHON" -m benchmarks.gpu.gpu_gate "$@"
