# The deployment test's client image: the trainer image (the package, torch, transformers, redis,
# grpcio-health-checking: the orchestrator runs from it) plus curl for the README's HTTP query.
# The pinned grpcio-health-checking below is what the trainer image has already (pip leaves it);
# it stays so that the driver's gRPC health probe does not depend on the trainer role's list.
# The driver code is mounted at /driver at run time. Built by
#   RLVR_BUILD_ONLY=driver deploy/build-images.sh
# (the deployment test does it first: pip needs the host's pip set-up mounted into the build).
ARG TRAINER_IMAGE=rlvr-world/trainer:0.1.0
FROM ${TRAINER_IMAGE}
USER 0
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl \
    && rm -rf /var/lib/apt/lists/* \
    && /opt/venv/bin/pip install --no-cache-dir --no-deps grpcio-health-checking==1.85.1 \
    && /opt/venv/bin/pip check
USER 10001:10001
ENTRYPOINT ["python", "/driver/driver.py"]
