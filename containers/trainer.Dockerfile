# syntax=docker/dockerfile:1
# kernelrl trainer image: torch + trl + peft for the sft, selfsup and crl steps (and augment with API teachers).
#   docker build -f containers/base.Dockerfile -t kernelrl/base .
#   docker build -f containers/trainer.Dockerfile -t kernelrl/trainer .
# Build args: BASE_IMAGE (kernelrl/base by default), WITH_VLLM (true: trl's vLLM colocate mode and server client
# need vllm in this image; false for CPU test images), TORCH_INDEX_URL (empty: PyPI's CUDA build of torch;
# a CPU wheel index for CPU-only images).
ARG BASE_IMAGE=kernelrl/base:latest

FROM ${BASE_IMAGE}
ARG WITH_VLLM=true
ARG TORCH_INDEX_URL=""
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
USER 0
COPY containers/requirements-base.txt containers/requirements-trainer.txt containers/requirements-generator.txt /tmp/req/
RUN pip install --no-cache-dir ${TORCH_INDEX_URL:+--extra-index-url "${TORCH_INDEX_URL}"} -r /tmp/req/requirements-trainer.txt \
    && if [ "${WITH_VLLM}" = "true" ]; then \
        pip install --no-cache-dir -r /tmp/req/requirements-generator.txt; \
    fi
COPY pyproject.toml README.md /opt/kernelrl/
COPY kernelrl /opt/kernelrl/kernelrl
COPY steps /opt/kernelrl/steps
COPY flows /opt/kernelrl/flows
COPY recipes /opt/kernelrl/recipes
RUN pip install --no-cache-dir --no-deps -e /opt/kernelrl
WORKDIR /opt/kernelrl
USER 1000:1000
CMD ["python", "-m", "steps.sft", "--help"]
