# RLVR-World local Python base: Debian bookworm's Python 3.11 with venv, for hosts that cannot pull
# python:3.11-slim-bookworm. deploy/build-images.sh builds it FROM the debootstrap image
# (localhost/rlvr-world/debian:bookworm) and passes it to the role images as PYTHON_IMAGE.
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
# Debian's python3 follows bookworm's point releases; the pin is the distribution, not a version.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && ln -s /usr/bin/python3 /usr/local/bin/python \
    && rm -rf /var/lib/apt/lists/*
ENV LANG=C.UTF-8
CMD ["python3"]
