#!/usr/bin/env bash
# Build the kernelrl images on this node (no registry needed; deployments use image_pull_policy: Never).
#
#   infra/build_images.sh                 # base, flows, trainer (with vLLM), generator, evaluator
#   infra/build_images.sh --cpu           # CPU test images: base, flows, trainer without vLLM (no generator)
#   BASE_IMAGE=local/bookworm infra/build_images.sh --cpu    # from a local debootstrap base (no registry)
#   TAG=2026-11-22 infra/build_images.sh  # another tag than latest
#
# Env: BASE_IMAGE (OS + Python base, default python:3.11-slim-bookworm), TAG, TORCH_INDEX_URL (an extra pip index
# for torch, e.g. a CPU wheel index; empty: PyPI's CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE=${BASE_IMAGE:-python:3.11-slim-bookworm}
TAG=${TAG:-latest}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-}
CPU=0
case "${1:-}" in
    --cpu) CPU=1 ;;
    "") ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "usage: $0 [--cpu]" >&2; exit 2 ;;
esac
export DOCKER_BUILDKIT=1  # per-Dockerfile .dockerignore files (containers/*.Dockerfile.dockerignore)

build() {  # build FILE TAG [docker build args...]
    local file=$1 tag=$2
    shift 2
    echo "== $tag ($file)"
    docker build -f "$file" -t "$tag" "$@" .
}

build containers/base.Dockerfile "kernelrl/base:$TAG" --build-arg "BASE_IMAGE=$BASE_IMAGE"
build containers/base.Dockerfile "kernelrl/flows:$TAG" --target flows --build-arg "BASE_IMAGE=$BASE_IMAGE"
if [ "$CPU" = 1 ]; then
    build containers/trainer.Dockerfile "kernelrl/trainer:$TAG" --build-arg "BASE_IMAGE=kernelrl/base:$TAG" \
        --build-arg WITH_VLLM=false --build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL"
else
    build containers/trainer.Dockerfile "kernelrl/trainer:$TAG" --build-arg "BASE_IMAGE=kernelrl/base:$TAG" \
        --build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL"
    build containers/generator.Dockerfile "kernelrl/generator:$TAG" --build-arg "BASE_IMAGE=kernelrl/base:$TAG"
fi
if [ -f containers/evaluator.Dockerfile ]; then
    build containers/evaluator.Dockerfile "kernelrl/evaluator:$TAG"
fi
docker image ls "kernelrl/*"
