#!/usr/bin/env bash
# Make the local Debian base image `kernelrl/base-local:bookworm` (no image registry is reachable here, so there
# is nothing to pull): debootstrap bookworm from the host's Debian mirror, then `docker import`.
#
#   infra/docker-engine.sh start && eval "$(infra/docker-engine.sh env)"
#   infra/make-base-image.sh            # skips when the image exists; re-imports the cached rootfs tarball
#   infra/make-base-image.sh --force    # debootstrap again
#
# Every Dockerfile takes its base as `--build-arg BASE_IMAGE=...`: official CUDA/Python images in production,
# this one in tests (containers/cpu-step.Dockerfile). It carries the host's CA bundle (PIP_CERT, SSL_CERT_FILE),
# without which pip inside a build cannot reach the package registry here. Cached on the machine twice: the image in the engine's
# data-root, and the rootfs tarball in KERNELRL_ENGINE_DIR/.. (so a fresh engine re-imports in seconds).
#
# Env: BASE_LOCAL_IMAGE (tag), KERNELRL_DEBIAN_MIRROR (default: the host's apt mirror, else deb.debian.org),
# KERNELRL_ENGINE_DIR (see docker-engine.sh), DOCKER_HOST (default: our engine's socket).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${BASE_LOCAL_IMAGE:-kernelrl/base-local:bookworm}
ENGINE_DIR=${KERNELRL_ENGINE_DIR:-/var/cache/kernelrl/docker}
CACHE=$(dirname "$ENGINE_DIR")
TARBALL="$CACHE/bookworm-rootfs.tar"
export DOCKER_HOST=${DOCKER_HOST:-$(infra/docker-engine.sh host)}
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

say() { echo "make-base-image: $*" >&2; }

# Bump when what this script puts into the image changes: an older image is re-imported.
BASE_VERSION=2
CA=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
if [ "$FORCE" = 0 ] && [ "$(docker image inspect -f '{{index .Config.Labels "org.kernelrl.base-version"}}' "$IMAGE" \
        2>/dev/null)" = "$BASE_VERSION" ]; then
    say "$IMAGE exists"
    exit 0
fi

mirror() {  # the host's Debian mirror (deb822 or one-line sources), else the public one
    local m=${KERNELRL_DEBIAN_MIRROR:-}
    if [ -z "$m" ]; then
        m=$(grep -hsE '^URIs: .*/debian/?$' /etc/apt/sources.list.d/*.sources | head -n1 | awk '{print $2}' || true)
    fi
    if [ -z "$m" ]; then
        m=$(grep -hsE '^deb .* bookworm( |$)' /etc/apt/sources.list | head -n1 | awk '{print $2}' || true)
    fi
    echo "${m:-http://deb.debian.org/debian}"
}

if [ "$FORCE" = 1 ] || [ ! -s "$TARBALL" ]; then
    [ "$(id -u)" = 0 ] || { say "debootstrap needs root"; exit 1; }
    command -v debootstrap >/dev/null 2>&1 || {
        say "installing debootstrap (apt)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null; }
    }
    MIRROR=$(mirror)
    mkdir -p "$CACHE"
    ROOTFS=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    trap 'rm -rf "$ROOTFS" "$TARBALL.tmp"' EXIT
    say "debootstrap bookworm from $MIRROR"
    t0=$SECONDS
    # minbase: apt + essential packages only; python3 and friends come in each Dockerfile
    debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 || {
        tail -n 20 "$CACHE/debootstrap.log" >&2
        exit 1
    }
    # apt in images built FROM this uses the same mirror (+ security updates); no caches in the image
    cat >"$ROOTFS/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb ${MIRROR%/debian}/debian-security bookworm-security main
EOF
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/tmp/* 2>/dev/null || true
    tar --numeric-owner -C "$ROOTFS" -cf "$TARBALL.tmp" .
    mv "$TARBALL.tmp" "$TARBALL"
    rm -rf "$ROOTFS"
    trap - EXIT
    say "rootfs done in $((SECONDS - t0)) s ($(du -h "$TARBALL" | cut -f1))"
fi

say "importing $TARBALL as $IMAGE"
# The host's CA bundle goes in at import time (not into the cached tarball): pip and apt over TLS inside images
# built FROM this one reach the registry only with it. As a local CA too, so an image that installs Debian's
# ca-certificates (update-ca-certificates rebuilds the bundle) keeps it; PIP_CERT/SSL_CERT_FILE point at it.
IMPORT=$(mktemp "$CACHE/import.XXXXXX.tar")
EXTRA=$(mktemp -d "$CACHE/extra.XXXXXX")
trap 'rm -rf "$IMPORT" "$EXTRA"' EXIT
cp "$TARBALL" "$IMPORT"
mkdir -p "$EXTRA/etc/ssl/certs" "$EXTRA/usr/local/share/ca-certificates"
cp "$CA" "$EXTRA/etc/ssl/certs/ca-certificates.crt"
cp "$CA" "$EXTRA/usr/local/share/ca-certificates/kernelrl-host-bundle.crt"
tar --numeric-owner --owner=0 --group=0 -C "$EXTRA" -rf "$IMPORT" ./etc/ssl ./usr/local/share/ca-certificates
docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change "LABEL org.kernelrl.base-version=$BASE_VERSION" \
    --change 'CMD ["/bin/bash"]' \
    --message "debootstrap --variant=minbase bookworm + host CA bundle (infra/make-base-image.sh)" \
    "$IMPORT" "$IMAGE" >/dev/null
rm -rf "$IMPORT" "$EXTRA"
trap - EXIT
say "$IMAGE ready"
