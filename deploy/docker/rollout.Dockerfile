# syntax=docker/dockerfile:1
# RLVR-World rollout image: the rollout service, transformers engine: gRPC :50061, /metrics :9101 (needs RLVR_ROLLOUT_MODEL).
# Build from the repository root:
#   docker build -f deploy/docker/rollout.Dockerfile -t rlvr-world/rollout:0.1.0 .
# TORCH_INDEX_URL: where the torch wheel comes from. The default is the PyTorch CPU index (small,
# no CUDA libraries); pass --build-arg TORCH_INDEX_URL=<index URL> for another build
# (PyPI's own index, the CUDA build), or a mirror's URL where download.pytorch.org is unreachable.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY rlvr_world ./rlvr_world
COPY services ./services
COPY trainer ./trainer
RUN pip wheel --no-cache-dir --wheel-dir /wheels --extra-index-url "${TORCH_INDEX_URL}" ".[rollout]"

FROM ${PYTHON_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels "rlvr-world[rollout]==0.1.0" \
    && groupadd --gid 10001 rlvr \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin rlvr
ENV RLVR_ROLLOUT_HOST=0.0.0.0 \
    RLVR_ROLLOUT_GRPC_PORT=50061 \
    RLVR_ROLLOUT_METRICS_PORT=9101
USER 10001:10001
WORKDIR /home/rlvr
EXPOSE 50061 9101
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-m", "rlvr_world.apps.healthcheck", "grpc", "127.0.0.1:50061"]
ENTRYPOINT ["rlvr-world"]
CMD ["serve", "rollout"]
