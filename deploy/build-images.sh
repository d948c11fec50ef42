#!/usr/bin/env bash
# Build every image of the compose deployment with Podman, on a host that may reach no container
# registry: redis, prometheus, reward, reward-text, decoder, rollout, trainer (tagged
# rlvr-world/<role>:0.1.0). reward-text is reward.Dockerfile with REWARD_ROLE=reward-text: the
# text and web reward worker without torch, the perceptual models or scipy.
#
#   deploy/build-images.sh              # local base from debootstrap, then every image
#   RLVR_BASE=registry deploy/build-images.sh   # bases pulled: debian:bookworm-slim, python:3.11-slim
#
# Local base (RLVR_BASE=local, the default): `debootstrap --variant=minbase bookworm` imported as
# localhost/rlvr-world/debian:bookworm, and localhost/rlvr-world/python:3.11-bookworm on top of it
# (deploy/docker/python-base.Dockerfile). Both are made once and reused.
#
# pip inside a build uses this host's pip set-up: the paths in RLVR_BUILD_MOUNTS that exist (pip
# configuration files, global and root's own, the CA bundle, local wheel mirrors; PATH or
# HOST_PATH:BUILD_PATH) are bind-mounted read-only into the RUN steps only; nothing of them ends
# up in an image.
#
# torch: the images want a CPU build. RLVR_CPU_TORCH_WHEEL (default: /opt/wheels/torch-*+cpu-*.whl
# when present) is used for the roles that need torch but not torchvision (rollout, trainer),
# taken from the mounted mirror (and the decoder's optional WITH_FRAMES torch); TORCH_INDEX_URL is
# then left empty. The reward role imports
# torchvision (ST-LPIPS, LPIPS), which has no CPU build beside that wheel here, so it keeps the
# pinned torch/torchvision pair from the pip index (on PyPI: the CUDA build, with its libraries).
# Without a local CPU wheel every role takes torch from TORCH_INDEX_URL (PyTorch's CPU index).
#
# --fresh first removes every image of ours, the local bases included (make deploy-test FRESH=1),
# so the build takes the path a machine that never built them takes.
#
# Prints one line per image: name, size, build seconds. Set RLVR_BUILD_ONLY="reward trainer" to
# build a subset. RLVR_BUILD_ONLY=driver builds the deployment test's client image
# (tests/deploy/driver.Dockerfile, on top of the trainer image; not among the defaults: the test
# builds it itself). Needs root (podman) and deploy/podman/setup.sh done (run it first).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DOCKER="$ROOT/deploy/docker"
VERSION="${RLVR_IMAGE_VERSION:-0.1.0}"
RLVR_BASE="${RLVR_BASE:-local}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
RLVR_BUILD_MOUNTS="${RLVR_BUILD_MOUNTS-/etc/pip.conf /etc/xdg/pip $HOME/.config/pip/pip.conf:/root/.config/pip/pip.conf /opt/wheels /opt/pypi /opt/pypi-more /etc/ssl/certs/ca-certificates.crt}"
RLVR_BUILD_ONLY="${RLVR_BUILD_ONLY:-redis prometheus reward reward-text decoder rollout trainer}"
TORCH_INDEX_URL="${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"
if [[ -z ${RLVR_CPU_TORCH_WHEEL+x} ]]; then
    RLVR_CPU_TORCH_WHEEL="$(compgen -G '/opt/wheels/torch-*+cpu-*.whl' | sort | tail -n 1 || true)"
fi

log() { printf '[build-images] %s\n' "$*" >&2; }

mounts=()
for entry in $RLVR_BUILD_MOUNTS; do  # PATH (same path in the build) or HOST_PATH:BUILD_PATH
    src="${entry%%:*}"
    dst="${entry#*:}"
    if [[ -e $src ]]; then
        mounts+=(--volume "$src:$dst:ro")
    fi
done

case "$RLVR_BASE" in
    local)
        DEBIAN_IMAGE=localhost/rlvr-world/debian:bookworm
        PYTHON_IMAGE=localhost/rlvr-world/python:3.11-bookworm
        ;;
    registry)
        DEBIAN_IMAGE=docker.io/library/debian:bookworm-slim
        PYTHON_IMAGE=docker.io/library/python:3.11-slim-bookworm
        ;;
    *)
        echo "RLVR_BASE must be local or registry, got $RLVR_BASE" >&2
        exit 2
        ;;
esac

make_debian_base() {
    if podman image exists "$DEBIAN_IMAGE"; then
        log "$DEBIAN_IMAGE exists"
        return
    fi
    local rootfs
    rootfs="$(mktemp -d /var/tmp/rlvr-debootstrap.XXXXXX)"
    # A RETURN trap outlives the function that sets it and would fire again when any later
    # function returns (there `rootfs` is unset, an error under `set -u`): clear it as it fires.
    trap 'rm -rf -- "$rootfs"; trap - RETURN' RETURN
    log "debootstrap --variant=minbase bookworm (from $DEBIAN_MIRROR)"
    debootstrap --variant=minbase bookworm "$rootfs" "$DEBIAN_MIRROR" >"$rootfs.log" 2>&1 \
        || { tail -n 20 "$rootfs.log" >&2; rm -f "$rootfs.log"; return 1; }
    rm -f "$rootfs.log"
    cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $DEBIAN_MIRROR bookworm main
deb $DEBIAN_MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
    # As the official debian:bookworm-slim image: apt keeps no package cache or binary caches,
    # and dpkg leaves out documentation, man pages and translations of everything installed.
    cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
EOF
    find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
        "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
    find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias \
        -exec rm -rf {} +
    tar -C "$rootfs" -c . | podman import \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$DEBIAN_IMAGE" >/dev/null
    log "imported $DEBIAN_IMAGE"
}

# build NAME DOCKERFILE CONTEXT [PODMAN BUILD OPTIONS...]: build and print "NAME SIZE SECONDS".
build() {
    local name="$1" dockerfile="$2" context="$3"
    shift 3
    local ignore=()
    if [[ -e $dockerfile.dockerignore ]]; then
        ignore=(--ignorefile "$dockerfile.dockerignore")
    fi
    local start end
    start=$(date +%s)
    podman build --quiet --layers --format docker "${ignore[@]}" -f "$dockerfile" \
        -t "$name" "$@" "$context" >/dev/null
    end=$(date +%s)
    printf '%-36s %8s MB %5d s\n' "$name" \
        "$(($(podman image inspect --format '{{.Size}}' "$name") / 1000000))" "$((end - start))"
}

torch_args() {  # build args of a role that needs torch but not torchvision
    if [[ -n $RLVR_CPU_TORCH_WHEEL ]]; then
        local version
        version="$(basename "$RLVR_CPU_TORCH_WHEEL" | cut -d- -f2)"
        printf '%s\n' --build-arg "TORCH_INDEX_URL=" --build-arg "TORCH_REQUIREMENT=torch==$version"
    else
        printf '%s\n' --build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL"
    fi
}

reward_args() {
    if [[ -n $RLVR_CPU_TORCH_WHEEL ]]; then
        printf '%s\n' --build-arg "TORCH_INDEX_URL="
    else
        printf '%s\n' --build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL"
    fi
}

EMPTY_CONTEXT="$(mktemp -d)"
trap 'rm -rf "$EMPTY_CONTEXT"' EXIT

# remove_ours: every image named rlvr-world/* or localhost/rlvr-world/* (the bases too).
remove_ours() {
    local images
    mapfile -t images < <(podman images --format '{{.Repository}}:{{.Tag}}' |
        grep -E '^(localhost/)?rlvr-world/' || true)
    if ((${#images[@]})); then
        podman rmi -f "${images[@]}" >/dev/null
    fi
    log "--fresh: removed ${#images[@]} images of ours"
}

main() {
    local empty="$EMPTY_CONTEXT" start
    start=$(date +%s)
    case "${1:-}" in
        --fresh) remove_ours ;;
        "") ;;
        *)
            echo "usage: build-images.sh [--fresh]" >&2
            exit 2
            ;;
    esac
    if [[ $RLVR_BASE == local ]]; then
        make_debian_base
        if ! podman image exists "$PYTHON_IMAGE"; then
            build "$PYTHON_IMAGE" "$DOCKER/python-base.Dockerfile" "$empty" \
                --build-arg "DEBIAN_IMAGE=$DEBIAN_IMAGE"
        fi
    fi
    local role args
    for role in $RLVR_BUILD_ONLY; do
        case "$role" in
            redis)  # its context: the start script only (redis.Dockerfile.dockerignore)
                build "rlvr-world/$role:$VERSION" "$DOCKER/$role.Dockerfile" "$ROOT" \
                    --build-arg "DEBIAN_IMAGE=$DEBIAN_IMAGE"
                ;;
            prometheus)
                build "rlvr-world/$role:$VERSION" "$DOCKER/$role.Dockerfile" "$empty" \
                    --build-arg "DEBIAN_IMAGE=$DEBIAN_IMAGE"
                ;;
            reward)
                mapfile -t args < <(reward_args)
                build "rlvr-world/$role:$VERSION" "$DOCKER/$role.Dockerfile" "$ROOT" "${mounts[@]}" \
                    --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" "${args[@]}"
                ;;
            reward-text)
                build "rlvr-world/$role:$VERSION" "$DOCKER/reward.Dockerfile" "$ROOT" "${mounts[@]}" \
                    --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" --build-arg "TORCH_INDEX_URL=" \
                    --build-arg "REWARD_ROLE=reward-text"
                ;;
            decoder | rollout | trainer)
                mapfile -t args < <(torch_args)
                build "rlvr-world/$role:$VERSION" "$DOCKER/$role.Dockerfile" "$ROOT" "${mounts[@]}" \
                    --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" "${args[@]}"
                ;;
            driver)
                build "rlvr-world/deploy-driver:$VERSION" "$ROOT/tests/deploy/driver.Dockerfile" \
                    "$empty" "${mounts[@]}" --build-arg "TRAINER_IMAGE=rlvr-world/trainer:$VERSION"
                ;;
            *)
                echo "unknown role $role" >&2
                exit 2
                ;;
        esac
    done
    log "all images built in $(($(date +%s) - start)) s"
}

main "$@"
