# Sourced by gpu_check.sh and gpu_gate.sh, from the checkout root: the Python ($PYTHON, else .venv's when it imports
# torch, else python3), the wheels carried in $WHEELS (default ./.whl) installed offline into /tmp/site, this working
# tree first on PYTHONPATH (evalsuite is imported from it), the model hub offline. Exits 1 when the wheels fail.
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]] && .venv/bin/python -c 'import torch' 2>/dev/null; then PYTHON=.venv/bin/python
  else PYTHON=python3; fi
fi
WHEELS="${WHEELS:-.whl}"
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  echo "== installing $(ls "$WHEELS"/*.whl | wc -l) carried wheels into /tmp/site (offline)"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$WHEELS"/*.whl || exit 1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
