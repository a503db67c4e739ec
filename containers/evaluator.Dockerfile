# syntax=docker/dockerfile:1
# kernelrl evaluator image: one evaluation worker per GPU (`kernelrl worker`), and the throw-away container that
# `kernelrl worker --sandbox docker` starts per candidate (entrypoint overridden to
# `python -m kernelrl.evaluation.docker_sandbox`, see kernelrl/evaluation/docker_sandbox.py).
# A CUDA *devel* base: nvcc and the CUDA headers build candidates' load_inline extensions; cuDNN for conv tasks.
# Build from the repository root (the build context):
#   docker build -f containers/evaluator.Dockerfile -t kernelrl/evaluator:dev .
#   docker run --rm --gpus '"device=GPU-<uuid>"' --network host -e KERNELRL_STORE_URL=... kernelrl/evaluator:dev --device cuda:0
# Build args: BASE_IMAGE (another CUDA devel base; Ubuntu 24.04's Python 3.12 is used), TORCH_INDEX_URL (an extra
# pip index for torch, e.g. https://download.pytorch.org/whl/cu128; empty: PyPI's CUDA build).
ARG BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04

FROM ${BASE_IMAGE}
ARG TORCH_INDEX_URL=""
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/cuda/bin:${PATH} \
    CUDA_HOME=/usr/local/cuda \
    HF_HUB_OFFLINE=1 \
    DO_NOT_TRACK=1
# Ubuntu's archive replaces exact package versions with security updates, so they are not pinned here: the
# base image tag pins the release. python3-dev: Python.h for torch's C++ extensions; g++: their host compiler.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev g++ ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv \
    && groupadd --gid 10001 evaluator \
    && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin evaluator
COPY containers/requirements-base.txt containers/requirements-evaluator.txt /tmp/req/
# torch pinned in requirements-evaluator.txt; psutil (the sandbox's process control) pinned as in requirements.txt
RUN pip install --no-cache-dir ${TORCH_INDEX_URL:+--extra-index-url "${TORCH_INDEX_URL}"} \
        -r /tmp/req/requirements-evaluator.txt psutil==7.2.2 \
    && rm -rf /tmp/req
# steps/ and recipes/ too: the flows' DockerRunner runs the bench step in this image (python -m steps.bench, working
# dir /opt/kernelrl, entrypoint overridden), and flows/ because the package metadata lists it.
COPY pyproject.toml README.md /opt/kernelrl/
COPY kernelrl /opt/kernelrl/kernelrl
COPY steps /opt/kernelrl/steps
COPY flows /opt/kernelrl/flows
COPY recipes /opt/kernelrl/recipes
RUN pip install --no-cache-dir --no-deps -e /opt/kernelrl \
    && chmod -R a+rX /opt/kernelrl \
    && python -c "import kernelrl.evaluation.jobworker, kernelrl.evaluation.docker_sandbox, kernelrl.step"
WORKDIR /tmp
USER 10001:10001
ENTRYPOINT ["kernelrl", "worker"]
CMD ["--device", "cuda:0"]
