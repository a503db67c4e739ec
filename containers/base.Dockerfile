# syntax=docker/dockerfile:1
# kernelrl base image: a Python 3.11 venv with kernelrl's runtime dependencies; every step image builds on it.
# Build from the repository root (the build context):
#   docker build -f containers/base.Dockerfile -t kernelrl/base .                   # trainer/generator base
#   docker build -f containers/base.Dockerfile --target flows -t kernelrl/flows .   # Prefect server/worker/flows
# No registry reachable (CI here): a local Debian base made with debootstrap + `docker import`:
#   docker build -f containers/base.Dockerfile --build-arg BASE_IMAGE=local/bookworm -t kernelrl/base .
# A bare Debian base has no Python: Debian's python3 (3.11 on bookworm) is installed then; python:3.11-slim has it.
# Pip needs the host's CA bundle behind a TLS-inspecting proxy: --build-arg PIP_CERT=/etc/ssl/certs/ca-certificates.crt
# after adding it to the base.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH} \
    HF_HUB_DISABLE_TELEMETRY=1 \
    DO_NOT_TRACK=1
# hadolint ignore=DL3008
RUN if ! command -v python3 >/dev/null 2>&1; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/venv \
    && groupadd --gid 1000 kernelrl \
    && useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash kernelrl \
    && mkdir -p /opt/kernelrl /kernelrl/out \
    && chown kernelrl:kernelrl /kernelrl/out
COPY containers/requirements-base.txt /tmp/req/
RUN pip install --no-cache-dir -r /tmp/req/requirements-base.txt
WORKDIR /opt/kernelrl

# Prefect server, the Docker work-pool worker, and flow runs (which start step containers through docker-py,
# with the host's /var/run/docker.sock mounted).
FROM base AS flows
COPY containers/requirements-flows.txt /tmp/req/
RUN pip install --no-cache-dir -r /tmp/req/requirements-flows.txt
COPY pyproject.toml README.md /opt/kernelrl/
COPY kernelrl /opt/kernelrl/kernelrl
COPY steps /opt/kernelrl/steps
COPY flows /opt/kernelrl/flows
COPY recipes /opt/kernelrl/recipes
COPY infra/prefect.yaml /opt/kernelrl/infra/prefect.yaml
# editable: recipes/ and the step modules resolve from /opt/kernelrl; `kernelrl` is on PATH
RUN pip install --no-cache-dir --no-deps -e /opt/kernelrl
USER 1000:1000
CMD ["prefect", "version"]
