# RLVR-World Prometheus image: Debian bookworm's prometheus package (2.42), uid 998.
# Built locally (no registry needed): deploy/build-images.sh, or
#   docker build -f deploy/docker/prometheus.Dockerfile -t rlvr-world/prometheus:0.1.0 .
# The scrape config is mounted at /etc/prometheus (deploy/prometheus/prometheus.yml).
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
# hadolint ignore=DL3008
RUN groupadd --system --gid 998 prometheus \
    && useradd --system --uid 998 --gid 998 --home-dir /var/lib/prometheus \
        --shell /usr/sbin/nologin prometheus \
    && apt-get update \
    && apt-get install -y --no-install-recommends prometheus \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o prometheus -g prometheus /prometheus
USER 998:998
WORKDIR /prometheus
EXPOSE 9090
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=5 \
    CMD ["promtool", "check", "ready", "--url", "http://127.0.0.1:9090"]
ENTRYPOINT ["prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus", \
     "--web.listen-address=:9090"]
