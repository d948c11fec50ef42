# syntax=docker/dockerfile:1
# RLVR-World decoder image: the token decoding service: gRPC :50062, /metrics :9102 (needs RLVR_DECODER_TOKENIZER).
# Build from the repository root:
#   docker build -f deploy/docker/decoder.Dockerfile -t rlvr-world/decoder:0.1.0 .
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
ENV RLVR_DECODER_HOST=0.0.0.0 \
    RLVR_DECODER_GRPC_PORT=50062 \
    RLVR_DECODER_METRICS_PORT=9102
USER 10001:10001
WORKDIR /home/rlvr
EXPOSE 50062 9102
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-m", "rlvr_world.apps.healthcheck", "grpc", "127.0.0.1:50062"]
ENTRYPOINT ["rlvr-world"]
CMD ["serve", "decoder"]
