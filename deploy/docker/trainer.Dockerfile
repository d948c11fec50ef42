# syntax=docker/dockerfile:1
# RLVR-World trainer image: the GRPO trainer fed by the Redis Stream, /metrics :9400
# (run.prometheus_port); checkpoints go to /runs (a volume shared with the rollout service).
# Build from the repository root (deploy/build-images.sh builds every image, with a local base
# where no registry can be reached):
#   docker build -f deploy/docker/trainer.Dockerfile -t rlvr-world/trainer:0.1.0 .
# Build arguments:
#   PYTHON_IMAGE       base with Python 3.11 and venv (default python:3.11-slim-bookworm)
#   TORCH_INDEX_URL    extra index for torch (default: PyTorch's CPU builds; empty: none)
#   TORCH_REQUIREMENT  replaces pyproject.toml's torch pin (empty: keep it)
# Stage 1 installs the role's pinned requirements (deploy/docker/requirements.py) and the project
# into /opt/venv; stage 2 copies that environment and runs as uid 10001.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_REQUIREMENT=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml ./
COPY deploy/docker/requirements.py ./deploy/docker/
RUN python3 deploy/docker/requirements.py trainer \
        ${TORCH_REQUIREMENT:+--replace "torch=${TORCH_REQUIREMENT}"} \
        > /tmp/requirements.txt \
    && python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install ${TORCH_INDEX_URL:+--extra-index-url "${TORCH_INDEX_URL}"} \
        -r /tmp/requirements.txt
COPY README.md ./
COPY rlvr_world ./rlvr_world
COPY services ./services
COPY trainer ./trainer
RUN /opt/venv/bin/pip install --no-deps . && /opt/venv/bin/pip check

FROM ${PYTHON_IMAGE}
RUN groupadd --gid 10001 rlvr \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin rlvr \
    && install -d -o 10001 -g 10001 /runs
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=1 \
    RLVR_REDIS_URL=redis://redis:6379/0
USER 10001:10001
WORKDIR /home/rlvr
EXPOSE 9400
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-m", "rlvr_world.apps.healthcheck", "http", "http://127.0.0.1:9400/metrics"]
ENTRYPOINT ["rlvr-world"]
CMD ["train", "--config", "/etc/rlvr/trainer.yaml", "--resume", "--set", "run.prometheus_port=9400"]
