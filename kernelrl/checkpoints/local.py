"""Checkpoints in a local directory: ``<root>/<name>/<files>`` plus ``<root>/<name>/kernelrl-manifest.json``.

Every file is written to a temp name, fsynced and renamed into place; the manifest is written the same way,
last. Stale temp files from a crashed run are removed by the next sync of that checkpoint.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from kernelrl.checkpoints.base import (
    MANIFEST_NAME,
    CheckpointStore,
    ManifestEntry,
    fsync_dir,
    atomic_write,
    read_chunks,
    sha256_file,
    validate_name,
)


class LocalCheckpointStore(CheckpointStore):
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser().resolve()

    def __repr__(self) -> str:
        return f"LocalCheckpointStore({str(self.root)!r})"

    def path(self, name: str) -> Path:
        """The directory that holds checkpoint `name` (usable in place, e.g. `verify_local(store.path(n))`)."""
        return self.root / validate_name(name)

    def uri(self, name: str) -> str:
        return str(self.path(name))

    def _list_files(self, name: str) -> dict[str, int]:
        base = self.path(name)
        out = {}
        for dirpath, _dirs, files in os.walk(base):
            for fn in files:
                p = Path(dirpath) / fn
                rel = p.relative_to(base).as_posix()
                if rel != MANIFEST_NAME:
                    out[rel] = p.stat().st_size
        return out

    def _stored_sha256(self, name: str, rel: str) -> str | None:
        return sha256_file(self.path(name) / rel)

    def _put_file(self, name: str, rel: str, src: Path, entry: ManifestEntry) -> None:
        atomic_write(self.path(name) / rel, read_chunks(src))

    def _read_file(self, name: str, rel: str) -> Iterator[bytes]:
        return read_chunks(self.path(name) / rel)

    def _delete_files(self, name: str, rels: list[str]) -> None:
        for rel in rels:
            (self.path(name) / rel).unlink(missing_ok=True)

    def _read_manifest(self, name: str) -> bytes | None:
        try:
            return (self.path(name) / MANIFEST_NAME).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _write_manifest(self, name: str, data: bytes) -> None:
        atomic_write(self.path(name) / MANIFEST_NAME, [data])

    def _delete_manifest(self, name: str) -> None:
        m = self.path(name) / MANIFEST_NAME
        if m.exists():
            m.unlink()
            fsync_dir(m.parent)

    def _manifest_names(self, prefix: str) -> list[str]:
        names = []
        for dirpath, _dirs, files in os.walk(self.root):
            if MANIFEST_NAME in files and Path(dirpath) != self.root:
                name = Path(dirpath).relative_to(self.root).as_posix()
                if name.startswith(prefix):
                    names.append(name)
        return names

    def delete(self, name: str) -> None:
        try:
            self._delete_manifest(name)
            if self.path(name).exists():
                shutil.rmtree(self.path(name))
            parent = self.path(name).parent
            while parent != self.root and parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()  # prune now-empty intermediate dirs of names like runs/x/step-1
                parent = parent.parent
        except OSError as e:
            raise self._fail(f"deleting {self.uri(name)}", e) from e
