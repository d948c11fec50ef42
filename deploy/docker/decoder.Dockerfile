# syntax=docker/dockerfile:1
# RLVR-World decoder image: the token decoding service: gRPC :50062, /metrics :9102
# (needs RLVR_DECODER_TOKENIZER). Text decoding needs the tokenizer only, so the default image has
# no torch; WITH_FRAMES=1 adds torch for DecodeFrames (RLVR_DECODER_VIDEO_TOKENIZER).
# Bound to 0.0.0.0, it needs RLVR_API_TOKEN (clients send it as a bearer token; without it the
# service refuses to start, exit 2); health and /metrics are open.
# Build from the repository root (deploy/build-images.sh builds every image, with a local base
# where no registry can be reached):
#   docker build -f deploy/docker/decoder.Dockerfile -t rlvr-world/decoder:0.1.0 .
# Build arguments:
#   PYTHON_IMAGE       base with Python 3.11 and venv (default python:3.11-slim-bookworm)
#   WITH_FRAMES        1: also install torch for DecodeFrames (default 0)
#   TORCH_INDEX_URL    extra index for torch with WITH_FRAMES=1 (default: PyTorch's CPU builds)
#   TORCH_REQUIREMENT  replaces pyproject.toml's torch pin (empty: keep it)
# Stage 1 installs the role's pinned requirements (deploy/docker/requirements.py) and the project
# into /opt/venv; stage 2 copies that environment and runs as uid 10001.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG WITH_FRAMES=0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_REQUIREMENT=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml ./
COPY deploy/docker/requirements.py ./deploy/docker/
RUN python3 deploy/docker/requirements.py decoder > /tmp/requirements.txt \
    && index="" \
    && if [ "${WITH_FRAMES}" = 1 ]; then \
        python3 deploy/docker/requirements.py decoder-frames \
            ${TORCH_REQUIREMENT:+--replace "torch=${TORCH_REQUIREMENT}"} >> /tmp/requirements.txt \
        && index="${TORCH_INDEX_URL}"; \
    fi \
    && python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install ${index:+--extra-index-url "${index}"} -r /tmp/requirements.txt
COPY README.md ./
COPY rlvr_world ./rlvr_world
COPY services ./services
COPY trainer ./trainer
RUN /opt/venv/bin/pip install --no-deps . && /opt/venv/bin/pip check

FROM ${PYTHON_IMAGE}
RUN groupadd --gid 10001 rlvr \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin rlvr
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=1 \
    RLVR_DECODER_HOST=0.0.0.0 \
    RLVR_DECODER_GRPC_PORT=50062 \
    RLVR_DECODER_METRICS_PORT=9102
USER 10001:10001
WORKDIR /home/rlvr
EXPOSE 50062 9102
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-m", "rlvr_world.apps.healthcheck", "grpc", "127.0.0.1:50062"]
ENTRYPOINT ["rlvr-world"]
CMD ["serve", "decoder"]
