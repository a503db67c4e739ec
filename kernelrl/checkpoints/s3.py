"""Checkpoints in S3 or an S3-compatible store (MinIO, moto): ``s3://<bucket>/<prefix>/<name>/<files>``.

Each object carries its sha256 in user metadata (``x-amz-meta-sha256``), so a resumed sync skips files
already stored whole (an S3 object, multipart or not, appears only once complete). Large files go up in
parts through boto3's transfer manager. The manifest object is written last.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import boto3.exceptions
import botocore.exceptions
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from kernelrl.checkpoints.base import MANIFEST_NAME, CheckpointStore, ManifestEntry, validate_name
from kernelrl.errors import CheckpointError

MiB = 1 << 20
_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}


class S3CheckpointStore(CheckpointStore):
    _io_errors = (OSError, botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError,
                  boto3.exceptions.Boto3Error)

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str = "us-east-1",
        multipart_threshold: int = 8 * MiB,  # files above this go up in parts (S3's minimum part is 5 MiB)
        multipart_chunksize: int = 8 * MiB,  # part size; 10,000 parts max, so 8 MiB covers files up to ~78 GiB
        max_attempts: int = 5,  # botocore "standard" retries with backoff ride out short outages
        connect_timeout: float = 10.0,  # fail fast on a dead endpoint (the retry budget is on top)
        read_timeout: float = 120.0,  # a part upload on a slow link may take a while to be acknowledged
    ):
        if not bucket:
            raise CheckpointError("S3 checkpoint store needs a bucket name (s3://bucket/prefix)")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        config = Config(
            region_name=region,
            signature_version="s3v4",
            # MinIO and other S3 look-alikes: path-style URLs, and only the checksums the API requires
            # (boto3 >= 1.36 otherwise sends CRC32 trailers that older servers reject).
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            retries={"max_attempts": max_attempts, "mode": "standard"},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint_url, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
            config=config,
        )
        self.transfer = TransferConfig(multipart_threshold=multipart_threshold,
                                       multipart_chunksize=multipart_chunksize)

    def __repr__(self) -> str:  # no credentials here, ever
        return f"S3CheckpointStore(s3://{self.bucket}/{self.prefix}, endpoint={self.endpoint_url})"

    # keys ----------------------------------------------------------------------------------------------------
    def _key(self, name: str, rel: str = "") -> str:
        base = f"{self.prefix}/{name}" if self.prefix else name
        return f"{base}/{rel}" if rel else base

    def uri(self, name: str) -> str:
        return f"s3://{self.bucket}/{self._key(validate_name(name))}"

    def _list(self, key_prefix: str) -> Iterator[dict]:
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=key_prefix):
            yield from page.get("Contents", [])

    # primitives ----------------------------------------------------------------------------------------------
    def _list_files(self, name: str) -> dict[str, int]:
        base = self._key(name) + "/"
        return {o["Key"][len(base):]: o["Size"] for o in self._list(base) if o["Key"] != base + MANIFEST_NAME}

    def _head(self, key: str) -> dict | None:
        try:
            return self.client.head_object(Bucket=self.bucket, Key=key)
        except botocore.exceptions.ClientError as e:
            if e.response.get("Error", {}).get("Code") in _NOT_FOUND:
                return None
            raise

    def _stored_sha256(self, name: str, rel: str) -> str | None:
        head = self._head(self._key(name, rel))
        return None if head is None else head.get("Metadata", {}).get("sha256")

    def _put_file(self, name: str, rel: str, src: Path, entry: ManifestEntry) -> None:
        self.client.upload_file(str(src), self.bucket, self._key(name, rel),
                                ExtraArgs={"Metadata": {"sha256": entry.sha256}}, Config=self.transfer)

    def _read_file(self, name: str, rel: str) -> Iterator[bytes]:
        body = self.client.get_object(Bucket=self.bucket, Key=self._key(name, rel))["Body"]
        try:
            yield from body.iter_chunks(1 * MiB)
        finally:
            body.close()

    def _delete_files(self, name: str, rels: list[str]) -> None:
        keys = [self._key(name, r) for r in rels]
        self._delete_keys(keys)

    def _delete_keys(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": k} for k in keys[i:i + 1000]]
            resp = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            if resp.get("Errors"):
                err = resp["Errors"][0]
                raise CheckpointError(f"could not delete s3://{self.bucket}/{err['Key']}: {err.get('Message')}")

    def _read_manifest(self, name: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(name, MANIFEST_NAME))["Body"].read()
        except botocore.exceptions.ClientError as e:
            if e.response.get("Error", {}).get("Code") in _NOT_FOUND:
                return None
            raise

    def exists(self, name: str) -> bool:
        validate_name(name)
        try:
            return self._head(self._key(name, MANIFEST_NAME)) is not None  # HEAD: no body to fetch
        except self._io_errors as e:
            raise self._fail(f"checking {self.uri(name)}", e) from e

    def _write_manifest(self, name: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(name, MANIFEST_NAME), Body=data,
                               ContentType="application/json")

    def _delete_manifest(self, name: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(name, MANIFEST_NAME))

    def _manifest_names(self, prefix: str) -> list[str]:
        root = f"{self.prefix}/" if self.prefix else ""
        tail = "/" + MANIFEST_NAME
        return [o["Key"][len(root):-len(tail)] for o in self._list(root + prefix) if o["Key"].endswith(tail)]

    def delete(self, name: str) -> None:
        validate_name(name)
        try:
            self._delete_manifest(name)
            self._delete_keys([o["Key"] for o in self._list(self._key(name) + "/")])
        except self._io_errors as e:
            raise self._fail(f"deleting {self.uri(name)}", e) from e
