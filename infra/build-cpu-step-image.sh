#!/usr/bin/env bash
# Build the CPU step image `kernelrl/cpu-step:latest` (containers/cpu-step.Dockerfile) for the docker tests,
# from the local Debian base (infra/make-base-image.sh) and a build context assembled here:
#
#   infra/docker-engine.sh start && infra/make-base-image.sh && infra/build-cpu-step-image.sh
#
# The context holds the host's CPU torch wheel (`pip download torch==2.13.0 --no-deps` finds the local CPU
# wheel through the host's pip config; any other torch spec would fetch a multi-GB CUDA build), the host's CA
# bundle (pip inside a container reaches the registry only with it), the trimmed requirement list below with
# ../requirements.txt as constraints (the repository's measured pins), and the kernelrl source. Docker's layer
# cache keeps the torch and requirements layers: a source change rebuilds only the last layers (seconds).
#
# Env: CPU_STEP_IMAGE (tag), BASE_LOCAL_IMAGE, DOCKER_HOST (default: our engine's socket), TORCH_SPEC.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

IMAGE=${CPU_STEP_IMAGE:-kernelrl/cpu-step:latest}
BASE=${BASE_LOCAL_IMAGE:-kernelrl/base-local:bookworm}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
export DOCKER_HOST=${DOCKER_HOST:-$(infra/docker-engine.sh host)}
ENGINE_DIR=${KERNELRL_ENGINE_DIR:-/var/cache/kernelrl/docker}
WHEELS="$(dirname "$ENGINE_DIR")/wheels"
# What the steps and the evaluator import (kernelrl/, steps/): store, config, CLI, training, evaluation, reports.
REQUIREMENTS=(sqlalchemy psycopg2-binary alembic pydantic pydantic-settings pyyaml typer rich boto3 transformers trl
              peft accelerate datasets tokenizers numpy psutil matplotlib openai httpx requests)

say() { echo "build-cpu-step-image: $*" >&2; }
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] && PYTHON=.venv/bin/python

docker image inspect "$BASE" >/dev/null 2>&1 || infra/make-base-image.sh

# 1. the CPU torch wheel, cached on the machine
mkdir -p "$WHEELS"
if ! ls "$WHEELS"/torch-*.whl >/dev/null 2>&1; then
    say "finding the CPU torch wheel ($TORCH_SPEC)"
    "$PYTHON" -m pip download -q "$TORCH_SPEC" --no-deps -d "$WHEELS"
fi
WHEEL=$(ls "$WHEELS"/torch-*.whl | head -n1)
case "$WHEEL" in
    *cpu*) ;;
    *) say "warning: $WHEEL does not look like a CPU build" ;;
esac

# 2. the build context
CTX=$(mktemp -d "${TMPDIR:-/tmp}/kernelrl-cpu-step.XXXXXX")
trap 'rm -rf "$CTX"' EXIT
mkdir -p "$CTX/wheels" "$CTX/certs" "$CTX/req" "$CTX/src"
ln "$WHEEL" "$CTX/wheels/" 2>/dev/null || cp "$WHEEL" "$CTX/wheels/"
CA=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
cp "$CA" "$CTX/certs/ca-bundle.crt"
# constraints: the lock without torch's local-version suffix (the wheel above is the only torch)
sed -e 's/+cpu$//' requirements.txt >"$CTX/req/constraints.txt"
printf '%s\n' "${REQUIREMENTS[@]}" >"$CTX/req/cpu-step.txt"
cp pyproject.toml README.md "$CTX/src/"
for d in kernelrl steps flows recipes; do
    tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' -cf - "$d" | tar -C "$CTX/src" -xf -
done
cp containers/cpu-step.Dockerfile "$CTX/Dockerfile"

# 3. build (legacy builder: BuildKit would try to pull its frontend image from a registry)
say "building $IMAGE from $BASE"
t0=$SECONDS
DOCKER_BUILDKIT=0 docker build --network host --build-arg "BASE_IMAGE=$BASE" -t "$IMAGE" \
    --label "org.kernelrl.torch-wheel=$(basename "$WHEEL")" "$CTX" 2>&1 \
    | grep -vE '^( ---> |Removing intermediate container|Step [0-9]+/[0-9]+ : (ENV|LABEL|WORKDIR|CMD|SHELL|ARG))' \
    | grep -vE '^\s*$' || { say "build failed"; exit 1; }
docker image inspect "$IMAGE" >/dev/null
say "$IMAGE built in $((SECONDS - t0)) s ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
