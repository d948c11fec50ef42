# RLVR-World Prometheus image: the prometheus and promtool binaries of Debian bookworm's package
# (2.42), uid 998. Built locally (no registry needed): deploy/build-images.sh, or
#   docker build -f deploy/docker/prometheus.Dockerfile -t rlvr-world/prometheus:0.1.0 .
# Stage 1 installs the package; stage 2 keeps only the two binaries (linked to libc only): the
# package's web console pulls in ~220 MB of JavaScript libraries (moment-timezone's data alone is
# 218 MB) and is left out. Scraping, the TSDB and the HTTP API are all in the binary (the health
# probe is a promtool query, as this promtool has no `check ready`);
# dashboards are Grafana's. The scrape config is mounted at /etc/prometheus.
ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM ${DEBIAN_IMAGE} AS package
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends prometheus \
    && rm -rf /var/lib/apt/lists/*

FROM ${DEBIAN_IMAGE}
COPY --from=package /usr/bin/prometheus /usr/bin/promtool /usr/bin/
RUN groupadd --system --gid 998 prometheus \
    && useradd --system --uid 998 --gid 998 --home-dir /prometheus --no-create-home \
        --shell /usr/sbin/nologin prometheus \
    && install -d -o 998 -g 998 /prometheus /etc/prometheus
USER 998:998
WORKDIR /prometheus
EXPOSE 9090
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=5 \
    CMD ["promtool", "query", "instant", "http://127.0.0.1:9090", "up"]
ENTRYPOINT ["prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus", \
     "--web.listen-address=:9090"]
