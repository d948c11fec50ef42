# RLVR-World Redis image: Debian bookworm's redis-server, append-only file on /data, uid 999.
# Built locally (no registry needed): deploy/build-images.sh, or
#   docker build -f deploy/docker/redis.Dockerfile -t rlvr-world/redis:0.1.0 .
# The scored-group stream lives here: every write is fsynced to the AOF before Redis answers
# (appendfsync always), so a killed or restarted container loses no acknowledged entry.
# rlvr-redis (deploy/docker/redis-start.sh) starts it with $RLVR_REDIS_PASSWORD as requirepass,
# through a config file, never a command line; without a password it refuses to start (exit 2).
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
# hadolint ignore=DL3008
RUN groupadd --system --gid 999 redis \
    && useradd --system --uid 999 --gid 999 --home-dir /var/lib/redis --shell /usr/sbin/nologin redis \
    && apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o redis -g redis /data
COPY deploy/docker/redis-start.sh /usr/local/bin/rlvr-redis
USER 999:999
WORKDIR /data
EXPOSE 6379
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=10 \
    CMD ["rlvr-redis", "--ping"]
CMD ["rlvr-redis", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data", \
     "--appendonly", "yes", "--appendfsync", "always"]
