# kernelrl CPU step image for the docker-marked tests (tests/docker): the pipeline's steps and the evaluator's
# container sandbox on a CPU machine with no image registry. Not a production image (those are base/trainer/
# generator/evaluator, FROM CUDA/Python images).
#
# Built by infra/build-cpu-step-image.sh from a context it assembles (not the repository root):
#   wheels/torch-*.whl       the host's CPU torch wheel (pip on the host finds it through /etc/pip.conf)
#   certs/ca-bundle.crt      the host's CA bundle: pip reaches the package registry only with it
#   req/cpu-step.txt         what the steps import (a trimmed list); req/constraints.txt = ../requirements.txt
#   src/                     pyproject.toml README.md kernelrl/ steps/ flows/ recipes/
#   docker build --network host --build-arg BASE_IMAGE=kernelrl/base-local:bookworm -t kernelrl/cpu-step CTX
# --network host: the engine runs with --bridge=none (no default network for RUN steps); see infra/ENGINES.md.
ARG BASE_IMAGE=kernelrl/base-local:bookworm

FROM ${BASE_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HF_HUB_OFFLINE=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    DO_NOT_TRACK=1
# Debian's python3 is 3.11 on bookworm: the host's cp311 torch wheel fits. The host's CA bundle replaces
# Debian's (it holds the same roots plus whatever the registry connection here is signed with).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv \
    && mkdir -p /opt/kernelrl /kernelrl/out \
    && chmod 0777 /kernelrl/out
COPY certs/ca-bundle.crt /etc/ssl/certs/ca-certificates.crt
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt
COPY wheels/ /tmp/wheels/
RUN pip install -q /tmp/wheels/torch-*.whl && rm -rf /tmp/wheels
COPY req/ /tmp/req/
RUN pip install -q -c /tmp/req/constraints.txt -r /tmp/req/cpu-step.txt \
    && python -c "import torch, transformers, trl, peft, sqlalchemy, psycopg2; assert not torch.cuda.is_available()"
COPY src/ /opt/kernelrl/
# The source on sys.path through a .pth file (what an editable install does, without a build backend), and the
# `kernelrl` CLI. Steps run as `python -m steps.<stage>` from /opt/kernelrl (flows/runner.py DockerRunner).
RUN echo /opt/kernelrl > "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/kernelrl-src.pth" \
    && printf '#!/opt/venv/bin/python\nimport sys\nfrom kernelrl.cli import main\nsys.exit(main())\n' > /opt/venv/bin/kernelrl \
    && chmod 0755 /opt/venv/bin/kernelrl \
    && chmod -R a+rX /opt/kernelrl \
    && python -c "import kernelrl, kernelrl.step, steps.sft, kernelrl.evaluation, kernelrl.training.common"
WORKDIR /opt/kernelrl
CMD ["python", "-m", "steps.bench", "--help"]
