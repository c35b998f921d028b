#!/usr/bin/env bash
# GPU check (issue 22, item 7), now the CUDA-tests and decode steps of benchmarks/gpu/gpu_gate.sh: the CUDA tests, then
# decode speed and memory on a random Llama-3-8B-shaped model against `evalsuite plan`'s bandwidth-bound
# prediction (docs/gpu.md). Same set-up, same honest exit status (a step asked for that did not run fails).
#
#   bash benchmarks/gpu/gpu_check.sh                 # on a CUDA machine
#   bash benchmarks/gpu/gpu_check.sh --tiny          # the decode step on a small shape, on the CPU
cd "$(dirname "$0")/../.."
if [[ "${1:-}" == "--tiny" ]]; then
  exec bash benchmarks/gpu/gpu_gate.sh --tiny --steps env,decode "${@:2}"
fi
exec bash benchmarks/gpu/gpu_gate.sh --steps env,model,cuda-tests,decode "$@"
