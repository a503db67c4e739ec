"""Fixtures of the real-engine Docker suite (marker ``docker``): a private dockerd, the local images, a fresh
Postgres database, and cleanup.

    make test-docker                        # engine + images + this suite, engine stopped afterwards
    .venv/bin/python -m pytest -m docker tests/docker

The engine is ours alone (infra/docker-engine.sh: its own socket, no bridge network, no iptables), started when
the session starts unless it already runs; at the end every container on it is removed and the daemon is stopped
if this session started it (or ``KERNELRL_DOCKER_STOP_ENGINE=1``, which `make test-docker` sets; keep it with
``KERNELRL_DOCKER_KEEP_ENGINE=1`` when iterating). The suite skips, with the reason, only when the engine cannot
be started; ``KERNELRL_REQUIRE_DOCKER=1`` (CI) turns that skip into a failure.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.prefect_server import prefect_test_server

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "infra" / "docker-engine.sh"
STEP_IMAGE = os.environ.get("CPU_STEP_IMAGE", "kernelrl/cpu-step:latest")
BASE_IMAGE = os.environ.get("BASE_LOCAL_IMAGE", "kernelrl/base-local:bookworm")
TIMINGS: dict[str, float] = {}


def _unavailable(reason: str):
    if os.environ.get("KERNELRL_REQUIRE_DOCKER") == "1":
        pytest.fail(f"Docker engine required (KERNELRL_REQUIRE_DOCKER=1) but unavailable: {reason}")
    pytest.skip(f"no Docker engine: {reason}")


def _engine(cmd: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(ENGINE), cmd], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def docker_engine():
    """A docker-py client on our private engine (DOCKER_HOST set for the whole session)."""
    if os.name != "posix" or not ENGINE.exists():
        _unavailable("infra/docker-engine.sh is not usable here")
    was_running = _engine("status").returncode == 0
    t0 = time.monotonic()
    res = _engine("start")
    if res.returncode != 0:
        _unavailable(f"infra/docker-engine.sh start failed: {(res.stderr or res.stdout).strip()[-800:]}")
    TIMINGS["engine_start_s"] = time.monotonic() - t0
    host = _engine("host").stdout.strip()
    saved = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = host
    import docker

    client = docker.from_env(timeout=300)
    before = {c.id for c in client.containers.list(all=True)}
    try:
        yield client
    finally:
        leftovers = [c for c in client.containers.list(all=True) if c.id not in before]
        for c in client.containers.list(all=True):
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        client.close()
        stop = (not was_running or os.environ.get("KERNELRL_DOCKER_STOP_ENGINE") == "1") and \
            os.environ.get("KERNELRL_DOCKER_KEEP_ENGINE") != "1"
        if stop:
            res = _engine("stop", timeout=120)
            assert _engine("status").returncode != 0, f"the engine is still running after stop: {res.stderr}"
        if saved is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = saved
        assert not leftovers, f"containers left behind by the suite: {[c.name for c in leftovers]}"


@pytest.fixture(scope="session")
def step_image(docker_engine) -> str:
    """The CPU step image, (re)built from the current source (cached layers: seconds when only code changed)."""
    t0 = time.monotonic()
    for script in ("make-base-image.sh", "build-cpu-step-image.sh"):
        res = subprocess.run([str(ROOT / "infra" / script)], capture_output=True, text=True, timeout=1800,
                             env=dict(os.environ))
        if res.returncode != 0:
            pytest.fail(f"infra/{script} failed:\n{(res.stderr + res.stdout)[-3000:]}")
    TIMINGS["image_build_s"] = time.monotonic() - t0
    return STEP_IMAGE


def build(dockerfile: str, tag: str, base: str, *extra: str, name: str) -> str:
    """``docker build`` of one of containers/*.Dockerfile from the repository root, ``BASE_IMAGE=base``. Legacy
    builder: BuildKit would pull its ``docker/dockerfile:1`` frontend from a registry (none reachable here); the
    root .dockerignore applies."""
    t0 = time.monotonic()
    res = subprocess.run(["docker", "build", "--network", "host", "-f", f"containers/{dockerfile}",
                          "--build-arg", f"BASE_IMAGE={base}", *extra, "-t", tag, "."], cwd=ROOT,
                         capture_output=True, text=True, timeout=1800, env=dict(os.environ, DOCKER_BUILDKIT="0"))
    assert res.returncode == 0, f"{dockerfile} did not build:\n{(res.stdout + res.stderr)[-3000:]}"
    TIMINGS[f"{name}_build_s"] = time.monotonic() - t0
    return tag


@pytest.fixture(scope="session")
def evaluator_image(step_image):
    """containers/evaluator.Dockerfile (the evaluation service's image) built on this machine FROM the CPU step
    image: Debian's python3, the CPU torch wheel and the host's CA bundle are in place there (production: a CUDA
    devel base)."""
    return build("evaluator.Dockerfile", "kernelrl/evaluator:cpu-test", step_image, name="evaluator_image")


@pytest.fixture(scope="session")
def trainer_image(step_image):
    """containers/trainer.Dockerfile FROM the CPU step image without vLLM (its torch==2.13.0 pin is met by the
    CPU wheel there; from kernelrl/base it would download PyPI's multi-GB CUDA build)."""
    return build("trainer.Dockerfile", "kernelrl/trainer:cpu-test", step_image, "--build-arg", "WITH_VLLM=false",
                 name="trainer_image")


@pytest.fixture(scope="session")
def flows_image(docker_engine):
    """containers/base.Dockerfile (base and flows targets) FROM the local Debian base, as production builds it
    FROM python:3.11-slim (the local base carries the host's CA bundle for pip)."""
    subprocess.run([str(ROOT / "infra" / "make-base-image.sh")], check=True, capture_output=True, timeout=1800)
    build("base.Dockerfile", "kernelrl/base:cpu-test", BASE_IMAGE, "--target", "base", name="base_image")
    return build("base.Dockerfile", "kernelrl/flows:cpu-test", BASE_IMAGE, "--target", "flows", name="flows_image")


@pytest.fixture(scope="session")
def pg_database(pg_server):
    """A fresh database on the host's Postgres for the whole suite (containers reach it over host networking)."""
    from tests.conftest import create_pg_database, drop_pg_database

    url = create_pg_database("kernelrl_docker")
    yield url
    drop_pg_database(url)


@pytest.fixture
def step_env(tmp_path, monkeypatch, pg_database):
    """Settings a step container needs: the Postgres store, a checkpoint dir and a home on the host (mounted)."""
    from kernelrl.config.settings import get_settings

    home = tmp_path / "home"
    ckpt = tmp_path / "checkpoints"
    home.mkdir()
    ckpt.mkdir()
    monkeypatch.setenv("KERNELRL_HOME", str(home))
    monkeypatch.setenv("KERNELRL_STORE_URL", pg_database)
    monkeypatch.setenv("KERNELRL_CHECKPOINT_URI", str(ckpt))
    get_settings.cache_clear()
    yield {"home": home, "checkpoints": ckpt, "store_url": pg_database}
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test harness (a temporary server, ~20 s) for the suite."""
    with prefect_test_server("kernelrl-prefect-docker-"):
        yield


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        terminalreporter.write_line("docker suite timings: " + ", ".join(f"{k}={v:.1f}" for k, v in TIMINGS.items()))
