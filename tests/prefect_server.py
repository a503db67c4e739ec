"""One temporary Prefect server for a test module or session, with its own PREFECT_HOME.

    with prefect_test_server("kernelrl-prefect-") as home:
        ...   # flows run against a fresh server; its state lives under ``home``

PREFECT_HOME is set to a fresh temp dir (and restored afterwards, the dir removed), and the ephemeral server's
start-up timeout is raised: a cold 2-core machine can need over a minute (shared notes).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_ENV = ("PREFECT_HOME", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS")


@contextmanager
def prefect_test_server(prefix: str) -> Iterator[Path]:
    tmp = tempfile.mkdtemp(prefix=prefix)
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ["PREFECT_HOME"] = tmp
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    import flows.pipeline  # noqa: F401 - imports prefect.main, which configures logging: here, not mid-test
    from prefect.testing.utilities import prefect_test_harness

    try:
        with prefect_test_harness(server_startup_timeout=180):
            yield Path(tmp)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(tmp, ignore_errors=True)
