#!/usr/bin/env bash
# Make the virtual environment the rollout service runs from with the vLLM engine on a GPU.
#
#   scripts/setup_vllm_gpu.sh [VENV_DIR]          (default .venv-vllm; `make vllm-gpu-setup`)
#   scripts/setup_vllm_gpu.sh --dry-run REPORT    (resolve only, for Linux x86_64 and Python 3.12,
#                                                  from any machine: pip's JSON report in REPORT)
#
# The GPU counterpart of scripts/setup_vllm_cpu.sh: the official vLLM (CUDA) of pyproject.toml's
# `vllm` extra, in an environment of its own because vLLM pins its own torch and transformers
# (the extra's comment says which and why). `rlvr-world run` starts the rollout service from
# <checkout>/.venv-vllm/bin/python when vLLM is not installed beside it (rlvr_world/apps/pipeline/
# stack.py), with PYTHONPATH set to the checkout, as on the CPU.
#
# Contents: the core dependencies and the `vllm` extra as pyproject.toml pins them, numpy at vLLM's
# 2.3.5, the bottom of the core's range (vLLM's mistral-common[image] needs numpy < 2.4 on Python
# <= 3.12), the versions vLLM decides
# (VLLM_PINS: the set `pip --dry-run` resolved on 2026-12-04, the same as the CPU script's), then
# this project with --no-deps. Idempotent (a stamp file records a finished install of this list).
# Not run in this repository's sessions: they have no GPU; the dry run is what was checked.
#
# Environment: RLVR_VLLM_BASE_PYTHON (interpreter of the new environment, default python3.12).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The versions vLLM 0.32.0 decides (its torch pin; the newest transformers and tokenizers it
# takes; the newest numpy below 2.4): the CPU script's VLLM_PINS with the official vllm.
VLLM_PINS=(
    "torch==2.13.0"
    "transformers==5.19.0"
    "tokenizers==0.23.3"
    "numpy==2.3.5"
)

# The core's pins but numpy, and the vllm extra's, read from pyproject.toml.
mapfile -t PROJECT_PINS < <(python3 - "${ROOT}/pyproject.toml" <<'EOF'
import sys
import tomllib

project = tomllib.load(open(sys.argv[1], "rb"))["project"]
for req in project["dependencies"] + project["optional-dependencies"]["vllm"]:
    if not req.startswith("numpy"):
        print(req)
EOF
)

if [[ "${1:-}" == "--dry-run" ]]; then
    REPORT="${2:?--dry-run needs the path of the JSON report to write}"
    PLATFORMS=()
    for n in $(seq 5 39); do PLATFORMS+=(--platform "manylinux_2_${n}_x86_64"); done
    python3 -m pip install --dry-run --ignore-installed --quiet --report "${REPORT}" \
        --python-version 3.12 --implementation cp --only-binary=:all: "${PLATFORMS[@]}" \
        --platform manylinux2014_x86_64 --target "$(mktemp -d)" \
        "${VLLM_PINS[@]}" "${PROJECT_PINS[@]}"
    python3 -c "import json, sys; r = json.load(open(sys.argv[1])); \
v = {i['metadata']['name'].lower(): i['metadata']['version'] for i in r['install']}; \
print(len(v), 'packages:', {k: v.get(k) for k in ('vllm', 'torch', 'transformers', 'numpy')})" \
        "${REPORT}"
    exit 0
fi

VENV_DIR="${1:-.venv-vllm}"
PYTHON="${RLVR_VLLM_BASE_PYTHON:-python3.12}"
STAMP="${VENV_DIR}/.rlvr-vllm-gpu-stamp"
WANT="$(printf '%s\n' "${VLLM_PINS[@]}" "${PROJECT_PINS[@]}")"
if [[ -f "${STAMP}" && "$(cat "${STAMP}")" == "${WANT}" ]]; then
    echo "vLLM GPU environment ${VENV_DIR} is up to date"
    exit 0
fi

start=$(date +%s)
if [[ ! -x "${VENV_DIR}/bin/python" ]]; then
    "${PYTHON}" -m venv "${VENV_DIR}"
fi
echo "*" > "${VENV_DIR}/.gitignore"
PIP=("${VENV_DIR}/bin/python" -m pip install --quiet --no-compile)
"${PIP[@]}" "${VLLM_PINS[@]}" "${PROJECT_PINS[@]}"
"${PIP[@]}" --no-deps --editable "${ROOT}"
"${VENV_DIR}/bin/python" "${ROOT}/scripts/compile_bytecode.py" --site

# Smoke check: vLLM, its CUDA platform and the service's modules import.
"${VENV_DIR}/bin/python" -c "import vllm, services.rollout.vllm_engine, services.rollout.server; \
from vllm.platforms import current_platform as p; \
print('vllm', vllm.__version__, 'on', 'cpu' if p.is_cpu() else p.device_name)"
printf '%s' "${WANT}" > "${STAMP}"
echo "vLLM GPU environment ready in ${VENV_DIR} ($(( $(date +%s) - start )) s)"
