"""Checkpoint store: named directories kept in a local folder (the default) or in S3 / MinIO.

Usage::

    from kernelrl.checkpoints import open_checkpoint_store

    store = open_checkpoint_store()                      # KERNELRL_CHECKPOINT_URI, else <home>/checkpoints
    store = open_checkpoint_store("s3://ckpts/kernelrl") # endpoint/keys from KERNELRL_S3_* settings
    m = store.put_dir("out/sft", "runs/smoke/sft/step-20")   # -> CheckpointManifest (files, sizes, sha256)
    store.exists("runs/smoke/sft/step-20")               # True only once the manifest is written
    store.get_dir("runs/smoke/sft/step-20", "/tmp/sft")  # verifies every sha256; CheckpointError if corrupt
    [i.name for i in store.ls("runs/smoke/")]            # complete checkpoints only
    store.uri("runs/smoke/sft/step-20")                  # a path or s3://bucket/prefix/runs/smoke/sft/step-20
    store.verify_local("/tmp/sft")                       # [] when the files match the manifest inside

Guarantees:

* **Manifest last.** A checkpoint is complete only when ``<name>/kernelrl-manifest.json`` exists. It is
  written after every file is stored, and removed first when a checkpoint is rewritten or deleted, so it
  never describes a partial checkpoint. ``exists`` and ``ls`` look only at manifests.
* **Resumable.** ``put_dir`` skips files already stored with the same size and sha256 (S3: sha256 in object
  metadata), so a rerun after a crash or outage sends only what is missing; ``get_dir`` skips local files
  that already match. Large files go to S3 in multipart uploads.
* **Atomic files.** Local files are written to a temp name, fsynced, and renamed; a full disk raises
  ``CheckpointError`` and leaves no manifest.
* Names are relative '/'-separated paths (``runs/smoke/sft/step-20``); ``..``, absolute paths and empty parts
  are rejected, and a checkpoint cannot be nested inside another one.

Not handled: two writers syncing the *same* name at once (give each writer its own name, e.g. per step).
Empty directories are not kept. Interrupted S3 multipart uploads may leave parts on the server; a bucket
lifecycle rule (AbortIncompleteMultipartUpload) cleans those up.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

from kernelrl.checkpoints.base import (
    MANIFEST_NAME,
    CheckpointInfo,
    CheckpointManifest,
    CheckpointStore,
    ManifestEntry,
    verify_local,
)
from kernelrl.checkpoints.local import LocalCheckpointStore
from kernelrl.errors import ConfigError

__all__ = [
    "CheckpointStore", "LocalCheckpointStore", "S3CheckpointStore", "CheckpointManifest", "ManifestEntry",
    "CheckpointInfo", "MANIFEST_NAME", "open_checkpoint_store", "verify_local",
]


def __getattr__(name: str) -> Any:
    """``S3CheckpointStore`` is imported on first use: boto3 (17 MB with botocore) is needed only for s3:// URIs,
    so a host that keeps checkpoints in a local folder (the GPU runs, which carry their packages) needs none."""
    if name == "S3CheckpointStore":
        from kernelrl.checkpoints.s3 import S3CheckpointStore

        return S3CheckpointStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _secret(value: Any) -> str | None:
    if value is None:
        return None
    return value.get_secret_value() if hasattr(value, "get_secret_value") else str(value)


def open_checkpoint_store(uri: Any = None, settings: Any = None) -> CheckpointStore:
    """A store for `uri` (a local path, ``file://path`` or ``s3://bucket/prefix``).

    With no `uri`, ``settings.resolved_checkpoint_uri`` is used; `settings` defaults to
    ``kernelrl.config.settings.get_settings()`` and supplies the S3 endpoint, keys and region. A Settings
    object may also be passed as the first argument.
    """
    if uri is not None and not isinstance(uri, (str, os.PathLike)):
        uri, settings = None, uri  # open_checkpoint_store(settings)
    if settings is None:
        from kernelrl.config.settings import get_settings

        settings = get_settings()
    if uri is None:
        uri = settings.resolved_checkpoint_uri
    uri = os.fspath(uri)
    if uri.startswith("s3://"):
        from kernelrl.checkpoints.s3 import S3CheckpointStore

        parsed = urlparse(uri)
        if not parsed.netloc:
            raise ConfigError(f"checkpoint URI {uri!r}: no bucket (expected s3://bucket/prefix)")
        return S3CheckpointStore(
            parsed.netloc,
            parsed.path.strip("/"),
            endpoint_url=settings.s3_endpoint_url,
            access_key=_secret(settings.s3_access_key_id),
            secret_key=_secret(settings.s3_secret_access_key),
            region=settings.s3_region,
        )
    if uri.startswith("file://"):
        return LocalCheckpointStore(uri[len("file://"):])
    if "://" in uri:
        raise ConfigError(f"checkpoint URI {uri!r}: unsupported scheme (use a local path or s3://bucket/prefix)")
    return LocalCheckpointStore(uri)
