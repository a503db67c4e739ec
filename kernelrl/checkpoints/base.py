"""The store-independent half of checkpoints: names, manifests, hashing, atomic local writes, and the
manifest-last sync algorithm that `LocalCheckpointStore` and `S3CheckpointStore` share.

A store only supplies a few primitives (list/put/read/delete one file, read/write/delete the manifest);
`CheckpointStore.put_dir` and `get_dir` implement the contract on top of them:

* a checkpoint is complete only when its manifest exists, and the manifest is written last;
* before a checkpoint is changed its old manifest is removed, so a manifest never describes files that are
  being rewritten;
* an upload resumes per file: a file already stored with the same size and sha256 is skipped;
* a download verifies every file's sha256 before it is moved into place.
"""

from __future__ import annotations

import abc
import datetime as _dt
import errno
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import kernelrl
from kernelrl.errors import CheckpointError

MANIFEST_NAME = "kernelrl-manifest.json"
MANIFEST_FORMAT = "kernelrl-checkpoint/1"
TMP_MARK = ".kernelrl-tmp-"
CHUNK = 1 << 20  # 1 MiB: big enough for throughput, small enough to keep memory flat on multi-GB files.

# progress(relative_path, action, size): action is "uploaded", "skipped" or "downloaded".
ProgressFn = Callable[[str, str, int], None]


# -- names ---------------------------------------------------------------------------------------------------
def validate_name(name: str, what: str = "checkpoint name") -> str:
    """Return `name` if it is a safe relative '/'-separated path, else raise CheckpointError."""
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"invalid {what} {name!r}: must be a non-empty string")
    bad = (
        name.startswith("/")
        or "\\" in name
        or any(ord(c) < 32 for c in name)
        or (len(name) > 1 and name[1] == ":")  # C:foo, a Windows drive
    )
    parts = name.split("/")
    if bad or any(p in ("", ".", "..") for p in parts):
        raise CheckpointError(
            f"invalid {what} {name!r}: use a relative path like 'runs/smoke/sft/step-20' "
            "(no leading '/', no '..' or '.' parts, no empty parts, no backslashes)"
        )
    if parts[-1] == MANIFEST_NAME:
        raise CheckpointError(f"invalid {what} {name!r}: {MANIFEST_NAME} is reserved")
    return name


def ancestors(name: str) -> list[str]:
    """'a/b/c' -> ['a', 'a/b']: names that would contain `name` if they were checkpoints."""
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


# -- manifest ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ManifestEntry:
    path: str  # relative, '/'-separated
    size: int
    sha256: str


@dataclass(frozen=True)
class CheckpointManifest:
    name: str
    files: tuple[ManifestEntry, ...]
    created_at: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat())
    kernelrl_version: str = kernelrl.__version__

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> bytes:
        doc = {
            "format": MANIFEST_FORMAT,
            "name": self.name,
            "created_at": self.created_at,
            "kernelrl_version": self.kernelrl_version,
            "total_bytes": self.total_bytes,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
        }
        return json.dumps(doc, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> CheckpointManifest:
        try:
            doc = json.loads(data)
            if doc.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"unknown format {doc.get('format')!r}")
            files = tuple(
                ManifestEntry(validate_name(f["path"], "file path"), int(f["size"]), str(f["sha256"]))
                for f in doc["files"]
            )
            return cls(doc["name"], files, doc["created_at"], doc.get("kernelrl_version", "?"))
        except (ValueError, KeyError, TypeError, CheckpointError) as e:
            raise CheckpointError(f"corrupt checkpoint manifest at {where}: {e}") from None


@dataclass(frozen=True)
class CheckpointInfo:
    name: str
    files: int
    bytes: int
    created_at: str


# -- local file helpers --------------------------------------------------------------------------------------
def read_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    for chunk in read_chunks(path):
        h.update(chunk)
    return h.hexdigest()


def _write_chunk(fh, data: bytes) -> None:
    # One seam for every local write, so tests can simulate a full disk (ENOSPC) realistically.
    fh.write(data)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(dst: Path, chunks: Iterable[bytes], before_commit: Callable[[], None] | None = None) -> None:
    """Write to a temp name beside `dst`, fsync, run `before_commit` (may raise), then rename over `dst`.

    A reader sees either no file / the old file or the whole new one, never a partial one; on any error the
    temp file is removed.
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as fh:
            for chunk in chunks:
                _write_chunk(fh, chunk)
            fh.flush()
            os.fsync(fh.fileno())
        if before_commit is not None:
            before_commit()
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(dst.parent)


def scan_dir(local_dir: Path) -> list[tuple[str, Path]]:
    """(relative posix path, absolute path) of every regular file under `local_dir`, sorted; a manifest at the
    top level is left out (put_dir writes a fresh one). Symlinked files are read through; empty dirs vanish."""
    out = []
    for dirpath, dirnames, filenames in os.walk(local_dir):
        dirnames.sort()
        for fn in filenames:
            p = Path(dirpath) / fn
            rel = p.relative_to(local_dir).as_posix()
            if rel != MANIFEST_NAME and p.is_file():
                out.append((rel, p))
    return sorted(out)


def verify_local(local_dir: str | os.PathLike) -> list[str]:
    """Check a checkpoint directory against the manifest inside it; return the problems (empty: all good)."""
    local_dir = Path(local_dir)
    mpath = local_dir / MANIFEST_NAME
    if not mpath.is_file():
        return [f"{local_dir}: no {MANIFEST_NAME} (incomplete or not a checkpoint)"]
    try:
        manifest = CheckpointManifest.from_json(mpath.read_bytes(), str(mpath))
    except CheckpointError as e:
        return [str(e)]
    problems = []
    for f in manifest.files:
        p = local_dir / f.path
        if not p.is_file():
            problems.append(f"{f.path}: missing")
        elif p.stat().st_size != f.size:
            problems.append(f"{f.path}: size {p.stat().st_size} != {f.size} in manifest")
        elif sha256_file(p) != f.sha256:
            problems.append(f"{f.path}: sha256 mismatch (corrupt)")
    return problems


# -- the store -----------------------------------------------------------------------------------------------
class CheckpointStore(abc.ABC):
    """A place that holds named checkpoint directories. See the package docstring for usage."""

    #: exceptions of the backend that mean "I/O failed" (turned into CheckpointError with context)
    _io_errors: tuple[type[BaseException], ...] = (OSError,)

    # primitives a backend provides ------------------------------------------------------------------------
    @abc.abstractmethod
    def uri(self, name: str) -> str: ...

    @abc.abstractmethod
    def _list_files(self, name: str) -> dict[str, int]:
        """relative path -> size of everything stored under checkpoint `name` except its manifest."""

    @abc.abstractmethod
    def _stored_sha256(self, name: str, rel: str) -> str | None:
        """sha256 of a stored file (None when unknown); used to skip files on a resumed upload."""

    @abc.abstractmethod
    def _put_file(self, name: str, rel: str, src: Path, entry: ManifestEntry) -> None:
        """Store one file atomically (never visible half-written)."""

    @abc.abstractmethod
    def _read_file(self, name: str, rel: str) -> Iterator[bytes]: ...

    @abc.abstractmethod
    def _delete_files(self, name: str, rels: list[str]) -> None: ...

    @abc.abstractmethod
    def _read_manifest(self, name: str) -> bytes | None: ...

    @abc.abstractmethod
    def _write_manifest(self, name: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def _delete_manifest(self, name: str) -> None: ...

    @abc.abstractmethod
    def _manifest_names(self, prefix: str) -> list[str]:
        """Names of all checkpoints (with a manifest) whose name starts with `prefix`."""

    @abc.abstractmethod
    def delete(self, name: str) -> None:
        """Remove a checkpoint: its manifest first (so it stops counting as complete), then its files."""

    # the contract --------------------------------------------------------------------------------------------
    def _fail(self, what: str, e: BaseException, note: str = "") -> CheckpointError:
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            msg = f"no space left on device while {what}; free some space"
        else:
            msg = f"{what} failed ({type(e).__name__}: {e})"
        return CheckpointError(msg + note)

    def exists(self, name: str) -> bool:
        """True only for a complete checkpoint (its manifest exists)."""
        validate_name(name)
        try:
            return self._read_manifest(name) is not None
        except self._io_errors as e:
            raise self._fail(f"checking {self.uri(name)}", e) from e

    def manifest(self, name: str) -> CheckpointManifest:
        validate_name(name)
        try:
            data = self._read_manifest(name)
        except self._io_errors as e:
            raise self._fail(f"reading the manifest of {self.uri(name)}", e) from e
        if data is None:
            raise CheckpointError(f"checkpoint {self.uri(name)} does not exist or is incomplete (no manifest)")
        return CheckpointManifest.from_json(data, self.uri(name))

    def ls(self, prefix: str = "") -> list[CheckpointInfo]:
        """Complete checkpoints whose name starts with `prefix`, sorted by name."""
        try:
            names = self._manifest_names(prefix)
        except self._io_errors as e:
            raise self._fail(f"listing checkpoints in {self!r}" + (f" under {prefix!r}" if prefix else ""), e) from e
        out = []
        for n in sorted(names):
            try:
                m = self.manifest(n)
            except CheckpointError:
                continue  # deleted meanwhile, or unreadable: not a complete checkpoint
            out.append(CheckpointInfo(n, len(m.files), m.total_bytes, m.created_at))
        return out

    def put_dir(self, local_dir: str | os.PathLike, name: str, *, progress: ProgressFn | None = None
                ) -> CheckpointManifest:
        """Sync `local_dir` to checkpoint `name`; resumable; the manifest is written only after every file."""
        validate_name(name)
        local_dir = Path(local_dir)
        if not local_dir.is_dir():
            raise CheckpointError(f"cannot store checkpoint {name!r}: {local_dir} is not a directory")
        target = self.uri(name)
        sources = scan_dir(local_dir)
        for rel, _ in sources:  # e.g. a copied checkpoint inside: its manifest would nest one checkpoint in another
            validate_name(rel, f"file path in {local_dir}")
        rel = None
        try:
            for a in ancestors(name):
                if self._read_manifest(a) is not None:
                    raise CheckpointError(f"cannot store {name!r} inside the existing checkpoint {a!r}")
            stored = self._list_files(name)
            nested = [r for r in stored if r.endswith("/" + MANIFEST_NAME)]
            if nested:
                inner = f"{name}/{nested[0][: -len(MANIFEST_NAME) - 1]}"
                raise CheckpointError(f"cannot store {name!r}: it would contain the checkpoint {inner!r}")
            # From here on the checkpoint is incomplete until the new manifest lands.
            self._delete_manifest(name)
            entries = []
            for rel, path in sources:
                entry = ManifestEntry(rel, path.stat().st_size, sha256_file(path))
                entries.append(entry)
                if stored.get(rel) == entry.size and self._stored_sha256(name, rel) == entry.sha256:
                    action = "skipped"
                else:
                    self._put_file(name, rel, path, entry)
                    action = "uploaded"
                if progress is not None:
                    progress(rel, action, entry.size)
            rel = None
            wanted = {e.path for e in entries}
            stale = [r for r in stored if r not in wanted]
            if stale:
                self._delete_files(name, stale)
            manifest = CheckpointManifest(name, tuple(entries))
            self._write_manifest(name, manifest.to_json())
            return manifest
        except self._io_errors as e:
            what = f"writing {rel} to checkpoint {target}" if rel else f"syncing checkpoint {target}"
            raise self._fail(what, e, "; rerun to resume (no manifest was written by this sync)") from e

    def get_dir(self, name: str, local_dir: str | os.PathLike, *, progress: ProgressFn | None = None) -> Path:
        """Download checkpoint `name` into `local_dir` (created), verifying every file's sha256.

        Files already there with the right checksum are kept (a download resumes too). The manifest is copied
        in last, so `verify_local(local_dir)` works later.
        """
        manifest = self.manifest(name)
        local_dir = Path(local_dir)
        rel = None
        try:
            local_dir.mkdir(parents=True, exist_ok=True)
            (local_dir / MANIFEST_NAME).unlink(missing_ok=True)
            for f in manifest.files:
                rel = f.path
                dst = local_dir / f.path
                if dst.is_file() and dst.stat().st_size == f.size and sha256_file(dst) == f.sha256:
                    action = "skipped"
                else:
                    self._download(name, f, dst)
                    action = "downloaded"
                if progress is not None:
                    progress(f.path, action, f.size)
            rel = MANIFEST_NAME
            atomic_write(local_dir / MANIFEST_NAME, [manifest.to_json()])
        except self._io_errors as e:
            where = f"{self.uri(name)} to {local_dir}" + (f" ({rel})" if rel else "")
            raise self._fail(f"downloading {where}", e, "; rerun to resume") from e
        return local_dir

    def _download(self, name: str, f: ManifestEntry, dst: Path) -> None:
        h = hashlib.sha256()
        size = 0

        def hashed() -> Iterator[bytes]:
            nonlocal size
            for chunk in self._read_file(name, f.path):
                h.update(chunk)
                size += len(chunk)
                yield chunk

        def check() -> None:
            if size != f.size or h.hexdigest() != f.sha256:
                raise CheckpointError(
                    f"checkpoint {self.uri(name)} is corrupt: {f.path} has {size} bytes / sha256 "
                    f"{h.hexdigest()[:12]}..., the manifest says {f.size} bytes / {f.sha256[:12]}..."
                )

        atomic_write(dst, hashed(), before_commit=check)

    def verify_local(self, local_dir: str | os.PathLike) -> list[str]:
        """Problems found checking `local_dir` against the manifest inside it (empty list: intact)."""
        return verify_local(local_dir)
