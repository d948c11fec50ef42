# syntax=docker/dockerfile:1
# RLVR-World reward image: one reward worker: gRPC :50051, HTTP gateway and /metrics :8000.
# Bound to 0.0.0.0, it needs RLVR_API_TOKEN (clients send it as a bearer token; without it the
# service refuses to start, exit 2); health and /metrics are open.
# Build from the repository root (deploy/build-images.sh builds every image, with a local base
# where no registry can be reached):
#   docker build -f deploy/docker/reward.Dockerfile -t rlvr-world/reward:0.1.0 .
# Build arguments:
#   PYTHON_IMAGE       base with Python 3.11 and venv (default python:3.11-slim-bookworm)
#   TORCH_INDEX_URL    extra index for torch/torchvision (default: PyTorch's CPU builds; empty: none)
#   TORCH_REQUIREMENT, TORCHVISION_REQUIREMENT   replace pyproject.toml's pins (empty: keep them)
#   REWARD_ROLE        reward (default: text, web and video) or reward-text: text and web only,
#                      no torch, perceptual models or scipy (rlvr-world/reward-text, a small image)
# Stage 1 installs the role's pinned requirements (deploy/docker/requirements.py) and the project
# into /opt/venv; stage 2 copies that environment and runs as uid 10001.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_REQUIREMENT=""
ARG TORCHVISION_REQUIREMENT=""
ARG REWARD_ROLE=reward
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml ./
COPY deploy/docker/requirements.py ./deploy/docker/
RUN python3 deploy/docker/requirements.py "${REWARD_ROLE}" \
        ${TORCH_REQUIREMENT:+--replace "torch=${TORCH_REQUIREMENT}"} \
        ${TORCHVISION_REQUIREMENT:+--replace "torchvision=${TORCHVISION_REQUIREMENT}"} \
        > /tmp/requirements.txt \
    && python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install ${TORCH_INDEX_URL:+--extra-index-url "${TORCH_INDEX_URL}"} \
        -r /tmp/requirements.txt
COPY README.md ./
COPY rlvr_world ./rlvr_world
COPY services ./services
COPY trainer ./trainer
RUN /opt/venv/bin/pip install --no-deps . \
    && python3 deploy/docker/requirements.py "${REWARD_ROLE}" --pip-check /opt/venv/bin/python

FROM ${PYTHON_IMAGE}
RUN groupadd --gid 10001 rlvr \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin rlvr
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=1 \
    RLVR_REWARD_HOST=0.0.0.0 \
    RLVR_REWARD_GRPC_PORT=50051 \
    RLVR_REWARD_HTTP_PORT=8000
USER 10001:10001
WORKDIR /home/rlvr
EXPOSE 50051 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-m", "rlvr_world.apps.healthcheck", "grpc", "127.0.0.1:50051"]
ENTRYPOINT ["rlvr-world"]
CMD ["serve", "reward"]
