# The deployment test's client image: the trainer image (the package, torch, transformers, redis)
# plus curl for the README's HTTP query. The driver code is mounted at /driver at run time.
#   podman build -f tests/deploy/driver.Dockerfile -t rlvr-world/deploy-driver:0.1.0 tests/deploy
ARG TRAINER_IMAGE=rlvr-world/trainer:0.1.0
FROM ${TRAINER_IMAGE}
USER 0
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl \
    && rm -rf /var/lib/apt/lists/*
USER 10001:10001
ENTRYPOINT ["python", "/driver/driver.py"]
