# syntax=docker/dockerfile:1
# kernelrl generator image: vLLM 0.31.0 (+ torch 2.13.0, transformers 5.17, trl 1.16) for generation: augment with
# local teacher models, and the vLLM server that GRPO uses in vllm_mode=server (`trl vllm-serve --model ...`).
#   docker build -f containers/base.Dockerfile -t kernelrl/base .
#   docker build -f containers/generator.Dockerfile -t kernelrl/generator .
# vLLM is pinned per image: 0.31.0 is the newest that trl 1.16's vllm extra accepts (stack notes).
ARG BASE_IMAGE=kernelrl/base:latest

FROM ${BASE_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
USER 0
COPY containers/requirements-base.txt containers/requirements-trainer.txt containers/requirements-generator.txt /tmp/req/
RUN pip install --no-cache-dir -r /tmp/req/requirements-generator.txt
COPY pyproject.toml README.md /opt/kernelrl/
COPY kernelrl /opt/kernelrl/kernelrl
COPY steps /opt/kernelrl/steps
COPY recipes /opt/kernelrl/recipes
RUN pip install --no-cache-dir --no-deps -e /opt/kernelrl
WORKDIR /opt/kernelrl
ENV VLLM_NO_USAGE_STATS=1
USER 1000:1000
CMD ["python", "-m", "vllm.entrypoints.openai.api_server", "--help"]
