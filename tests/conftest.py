"""Shared fixtures: offline single-threaded env, a fresh Postgres database per session, store URLs.

- ``pg_url``: a database created for this test session on the real Postgres at 127.0.0.1:5432 (trust auth)
  and dropped at the end, so several test runs can share the server.
- ``store_url``: parametrised over SQLite (a temp file) and Postgres; each test gets a clean, migrated store.
- ``s3_server`` / ``s3_bucket``: moto's real S3 HTTP server on loopback (tests/fixtures_s3.py).
"""

from __future__ import annotations

import os
import uuid

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

PG_ADMIN = os.environ.get("KERNELRL_TEST_PG", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")

try:
    from tests.fixtures_s3 import *  # noqa: F401,F403  (the S3 fixtures: moto on loopback)
except ImportError as _e:  # the GPU host (bench/gpu_session.sh runs the CUDA red team there) has no boto3/moto
    if "boto" not in str(_e) and "moto" not in str(_e):
        raise


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# Tests whose SQLite variant (store_url) runs in ``make test-slow`` only: the Postgres one, the production store,
# stays in ``make test`` (kept under 20 minutes on the 2-core CI machine; each variant takes ~16 s there).
SLOW_ON_SQLITE = {"test_killed_step_resumes_from_its_checkpoint"}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    has_cuda = _cuda_available()
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.originalname in SLOW_ON_SQLITE and params.get("store_url") == "sqlite":
            item.add_marker(pytest.mark.slow)


def _pg_admin_engine():
    from sqlalchemy import create_engine

    return create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The admin URL of the real Postgres; fails (not skips) when it is down: CI must start it."""
    from sqlalchemy import text

    eng = _pg_admin_engine()
    try:
        with eng.connect() as c:
            c.execute(text("select 1"))
    except Exception as e:  # pragma: no cover
        pytest.fail(f"Postgres at 127.0.0.1:5432 is not reachable ({e}); .ci/run starts it")
    finally:
        eng.dispose()
    return PG_ADMIN


def create_pg_database(prefix: str = "kernelrl_test") -> str:
    from sqlalchemy import text

    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    eng = _pg_admin_engine()
    with eng.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    eng.dispose()
    return PG_ADMIN.rsplit("/", 1)[0] + "/" + name


def drop_pg_database(url: str) -> None:
    from sqlalchemy import text

    name = url.rsplit("/", 1)[1]
    eng = _pg_admin_engine()
    with eng.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    eng.dispose()


@pytest.fixture
def pg_url(pg_server):
    """A fresh, empty Postgres database for one test."""
    url = create_pg_database()
    yield url
    drop_pg_database(url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request, tmp_path):
    """A migrated, empty store on SQLite and on the real Postgres."""
    from kernelrl.store import Store

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
        Store(url).upgrade()
        yield url
    else:
        request.getfixturevalue("pg_server")
        url = create_pg_database()
        store = Store(url)
        store.upgrade()
        store.engine.dispose()
        yield url
        drop_pg_database(url)


@pytest.fixture
def store(store_url):
    from kernelrl.store import Store

    s = Store(store_url)
    yield s
    s.engine.dispose()


@pytest.fixture
def isolated_home(tmp_path, monkeypatch):
    """KERNELRL_HOME in a temp dir, settings cache cleared: the embedded default, sandboxed per test."""
    from kernelrl.config.settings import get_settings

    monkeypatch.setenv("KERNELRL_HOME", str(tmp_path / "home"))
    for var in ("KERNELRL_STORE_URL", "KERNELRL_CHECKPOINT_URI"):
        monkeypatch.delenv(var, raising=False)
    get_settings.cache_clear()
    yield tmp_path / "home"
    get_settings.cache_clear()
