"""S3 test fixtures: moto's real S3 HTTP server on loopback (imported by tests/conftest.py).

- ``s3_server`` (session): a ``ThreadedMotoServer`` on 127.0.0.1 at a free port; yields its endpoint URL.
  Dummy AWS credentials are set in the environment for the session, and loopback bypasses any proxy.
- ``s3_bucket`` (function): a fresh bucket on that server; yields ``(endpoint_url, bucket_name)`` and empties
  the bucket afterwards (moto keeps objects in RAM).
- ``start_moto_server`` / ``stop_moto_server``: for fault tests that need a server of their own to kill. moto
  keeps its state in process-global backends, so a server restarted on the same port sees the same buckets.
"""

from __future__ import annotations

import functools
import logging
import uuid

import boto3
import pytest
from botocore.config import Config

__all__ = ["s3_server", "s3_bucket", "start_moto_server", "stop_moto_server", "s3_client"]

_DUMMY_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/dev/null",  # never read a developer's real ~/.aws profile
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


def start_moto_server(port: int = 0):
    """Start moto's S3 server on 127.0.0.1 (port 0: a free one); returns (server, endpoint_url)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one log line per request drowns failures
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    host, real_port = server.get_host_and_port()
    return server, f"http://{host}:{real_port}"


def stop_moto_server(server) -> None:
    """Stop the server and close its listening socket, so clients get 'connection refused' (moto's own
    ``stop()`` leaves the socket open and connections would hang instead)."""
    server.stop()
    if server._server is not None:
        server._server.server_close()


@functools.lru_cache(maxsize=8)
def s3_client(endpoint_url: str):
    """A plain boto3 client for checking what is on the server (cached: clients are thread-safe)."""
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url, region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                      response_checksum_validation="when_required", retries={"max_attempts": 2}),
    )


@pytest.fixture(scope="session")
def s3_server():
    with pytest.MonkeyPatch.context() as mp:
        for k, v in _DUMMY_ENV.items():
            mp.setenv(k, v)
        mp.delenv("AWS_PROFILE", raising=False)
        server, url = start_moto_server()
        try:
            yield url
        finally:
            stop_moto_server(server)


@pytest.fixture
def s3_bucket(s3_server):
    client = s3_client(s3_server)
    name = f"test-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    yield s3_server, name
    try:  # free moto's memory; a test that stopped the server may leave it unreachable, which is fine
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=name, Key=obj["Key"])
        client.delete_bucket(Bucket=name)
    except Exception:
        pass
