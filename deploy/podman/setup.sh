#!/usr/bin/env bash
# Install and configure the container engine of the compose deployment on a Debian bookworm host:
# Podman 4.3, podman-compose 1.0.3, runc, aardvark-dns (service names resolve on compose networks)
# and debootstrap (a local base image where no registry can be reached), plus this folder's
# containers.conf. Idempotent: packages already installed and an identical config are left alone;
# a different existing /etc/containers/containers.conf is kept as containers.conf.orig once.
# Needs root.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PACKAGES=(podman podman-compose runc aardvark-dns debootstrap)
CONF=/etc/containers/containers.conf

if [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh: needs root (apt-get install, $CONF)" >&2
    exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

mkdir -p /etc/containers
if ! cmp -s "$HERE/containers.conf" "$CONF"; then
    if [[ -e $CONF && ! -e $CONF.orig ]]; then
        cp "$CONF" "$CONF.orig"
    fi
    install -m 0644 "$HERE/containers.conf" "$CONF"
    echo "wrote $CONF"
fi

podman --version
podman-compose version 2>/dev/null | grep -i 'podman-compose' || true
