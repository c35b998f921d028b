# Sourced by gpu_gate.sh and gpu_check.sh, from the checkout root: the Python ($PYTHON, else .venv's when it imports
# torch, else python3), the wheels of the GPU bundle ($GPU_BUNDLE/wheels, default .cache/gpu-bundle: make
# gpu-bundle) and any in $WHEELS (default ./.whl) installed offline into /tmp/site, this working tree first on
# PYTHONPATH (evalsuite is imported from it), the model hub offline. Exits 1 when the wheels fail to install.
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]] && .venv/bin/python -c 'import torch' 2>/dev/null; then PYTHON=.venv/bin/python
  else PYTHON=python3; fi
fi
GPU_BUNDLE="${GPU_BUNDLE:-.cache/gpu-bundle}"
WHEELS="${WHEELS:-.whl}"
CARRIED=()
for dir in "$GPU_BUNDLE/wheels" "$WHEELS"; do
  if compgen -G "$dir/*.whl" >/dev/null; then CARRIED+=("$dir"/*.whl); fi
done
if (( ${#CARRIED[@]} )); then
  echo "== installing ${#CARRIED[@]} carried wheels into /tmp/site (offline)"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "${CARRIED[@]}" || exit 1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 GPU_BUNDLE
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
