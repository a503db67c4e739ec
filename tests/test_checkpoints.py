"""Checkpoint store contract, on a local directory and on a real S3 endpoint (moto's server on loopback)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kernelrl.checkpoints import (
    MANIFEST_NAME,
    LocalCheckpointStore,
    S3CheckpointStore,
    open_checkpoint_store,
    verify_local,
)
from kernelrl.checkpoints.base import TMP_MARK
from kernelrl.errors import CheckpointError, ConfigError
from tests.fixtures_s3 import s3_client

MiB = 1 << 20
BIG = "model/weights.bin"


def make_tree(root: Path, big_size: int = 6 * MiB) -> dict[str, bytes]:
    """A checkpoint-like dir with nested folders and one file big enough for a multipart upload."""
    files = {
        "config.json": b'{"hidden": 128}',
        "model/sub/a.txt": b"a" * 1000,
        BIG: os.urandom(big_size),
        "tokenizer/vocab.txt": b"hello\nworld\n",
        "zz.txt": b"last",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def s3_store(endpoint: str, bucket: str, **kw) -> S3CheckpointStore:
    kw.setdefault("max_attempts", 1)  # a dead endpoint must fail fast in tests
    kw.setdefault("connect_timeout", 2)
    return S3CheckpointStore(bucket, "ckpts", endpoint_url=endpoint, access_key="testing", secret_key="testing",
                             multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, **kw)


@pytest.fixture(params=["local", "s3"])
def ckpt_store(request, tmp_path):
    if request.param == "local":
        return LocalCheckpointStore(tmp_path / "store")
    endpoint, bucket = request.getfixturevalue("s3_bucket")
    return s3_store(endpoint, bucket)


@pytest.fixture
def tree(tmp_path) -> tuple[Path, dict[str, bytes]]:
    src = tmp_path / "src"
    return src, make_tree(src)


class Recorder:
    """A progress callback that remembers what each file went through."""

    def __init__(self):
        self.events: list[tuple[str, str]] = []

    def __call__(self, rel: str, action: str, size: int) -> None:
        self.events.append((rel, action))

    def which(self, action: str) -> list[str]:
        return [r for r, a in self.events if a == action]


def fail_on_nth_put(store, n: int):
    """Wrap the per-file upload so that the n-th file fails like a dropped connection."""
    real = store._put_file
    calls = []

    def put(name, rel, src, entry):
        calls.append(rel)
        if len(calls) == n:
            raise ConnectionResetError(f"simulated network failure on {rel}")
        return real(name, rel, src, entry)

    store._put_file = put
    return calls


def test_round_trip_nested_and_multipart(ckpt_store, tree, tmp_path):
    src, files = tree
    name = "runs/smoke/sft/step-20"
    m = ckpt_store.put_dir(src, name)
    assert [f.path for f in m.files] == sorted(files)
    assert m.total_bytes == sum(len(d) for d in files.values())
    assert ckpt_store.exists(name)

    out = ckpt_store.get_dir(name, tmp_path / "out")
    got = read_tree(out)
    assert got.pop(MANIFEST_NAME)
    assert got == files
    assert verify_local(out) == [] and ckpt_store.verify_local(out) == []

    doc = json.loads((out / MANIFEST_NAME).read_bytes())
    assert doc["name"] == name and doc["kernelrl_version"] and doc["created_at"]
    assert {f["path"]: f["size"] for f in doc["files"]} == {k: len(v) for k, v in files.items()}
    assert all(len(f["sha256"]) == 64 for f in doc["files"])

    if isinstance(ckpt_store, S3CheckpointStore):
        assert ckpt_store.uri(name) == f"s3://{ckpt_store.bucket}/ckpts/{name}"
        client = s3_client(ckpt_store.endpoint_url)
        big = client.head_object(Bucket=ckpt_store.bucket, Key=f"ckpts/{name}/{BIG}")
        assert big["ETag"].strip('"').endswith("-2"), "a 6 MiB file with 5 MiB parts goes up in 2 parts"
        assert len(big["Metadata"]["sha256"]) == 64
        small = client.head_object(Bucket=ckpt_store.bucket, Key=f"ckpts/{name}/config.json")
        assert "-" not in small["ETag"]
    else:
        assert ckpt_store.uri(name) == str(tmp_path / "store" / name)
        assert verify_local(ckpt_store.path(name)) == []


def test_exists_false_until_manifest_written_last(ckpt_store, tree):
    src, files = tree
    name = "runs/a/step-1"
    seen = {}
    real = ckpt_store._write_manifest

    def write_manifest(n, data):
        seen["exists"] = ckpt_store.exists(n)
        seen["ls"] = [i.name for i in ckpt_store.ls()]
        seen["stored"] = set(ckpt_store._list_files(n))
        return real(n, data)

    ckpt_store._write_manifest = write_manifest
    ckpt_store.put_dir(src, name)
    assert seen == {"exists": False, "ls": [], "stored": set(files)}  # every file stored before the manifest
    assert ckpt_store.exists(name)


def test_interrupted_sync_leaves_no_manifest_and_resumes(ckpt_store, tree, tmp_path):
    src, files = tree
    name = "runs/a/step-2"
    order = sorted(files)
    calls = fail_on_nth_put(ckpt_store, 3)
    with pytest.raises(CheckpointError, match="rerun to resume .no manifest was written") as ei:
        ckpt_store.put_dir(src, name)
    assert order[2] in str(ei.value)
    assert calls == order[:3]
    assert not ckpt_store.exists(name)
    assert ckpt_store.ls() == []
    with pytest.raises(CheckpointError, match="no manifest"):
        ckpt_store.get_dir(name, tmp_path / "out")
    assert set(ckpt_store._list_files(name)) == set(order[:2])  # the failed file left nothing behind

    del ckpt_store._put_file  # the network is back
    rec = Recorder()
    ckpt_store.put_dir(src, name, progress=rec)
    assert rec.which("skipped") == order[:2]
    assert rec.which("uploaded") == order[2:]
    out = ckpt_store.get_dir(name, tmp_path / "out")
    assert verify_local(out) == []


def test_resync_uploads_only_changes_and_drops_removed_files(ckpt_store, tree, tmp_path):
    src, files = tree
    name = "exp/ckpt"
    ckpt_store.put_dir(src, name)
    (src / "zz.txt").write_bytes(b"LAST")  # same size, new content: must be caught by sha256
    (src / "tokenizer/vocab.txt").unlink()
    (src / "new.bin").write_bytes(b"new")
    rec = Recorder()
    m = ckpt_store.put_dir(src, name, progress=rec)
    assert sorted(rec.which("uploaded")) == ["new.bin", "zz.txt"]
    assert sorted(rec.which("skipped")) == ["config.json", "model/sub/a.txt", BIG]
    assert "tokenizer/vocab.txt" not in ckpt_store._list_files(name)
    assert {f.path for f in m.files} == set(ckpt_store._list_files(name))
    out = read_tree(ckpt_store.get_dir(name, tmp_path / "out"))
    assert out["zz.txt"] == b"LAST" and "tokenizer/vocab.txt" not in out


def test_corrupt_file_detected_on_get(ckpt_store, tree, tmp_path):
    src, files = tree
    name = "runs/c/step-1"
    ckpt_store.put_dir(src, name)
    bad = b"b" * 1000  # same size as model/sub/a.txt, different bytes
    if isinstance(ckpt_store, S3CheckpointStore):
        s3_client(ckpt_store.endpoint_url).put_object(
            Bucket=ckpt_store.bucket, Key=f"ckpts/{name}/model/sub/a.txt", Body=bad)
    else:
        (ckpt_store.path(name) / "model/sub/a.txt").write_bytes(bad)
        assert verify_local(ckpt_store.path(name)) == ["model/sub/a.txt: sha256 mismatch (corrupt)"]
    out = tmp_path / "out"
    with pytest.raises(CheckpointError, match=r"corrupt: model/sub/a.txt"):
        ckpt_store.get_dir(name, out)
    assert not (out / "model/sub/a.txt").exists()  # the bad bytes never reached their final name
    assert not (out / MANIFEST_NAME).exists()
    assert not [p for p in out.rglob("*") if TMP_MARK in p.name]


def test_verify_local_reports_corruption_and_missing(ckpt_store, tree, tmp_path):
    src, files = tree
    ckpt_store.put_dir(src, "x")
    out = ckpt_store.get_dir("x", tmp_path / "out")
    (out / "config.json").write_bytes(b"{}")
    (out / "zz.txt").unlink()
    with open(out / BIG, "r+b") as fh:
        # flip the byte at 3 MiB (read it, then seek back: the read moves the position, and writing 0 or 1 at the
        # next offset left the file unchanged whenever that random byte already held it, 1 run in ~256)
        fh.seek(3 * MiB)
        old = fh.read(1)[0]
        fh.seek(3 * MiB)
        fh.write(bytes([old ^ 0xFF]))
    assert sorted(verify_local(out)) == [
        "config.json: size 2 != 15 in manifest", f"{BIG}: sha256 mismatch (corrupt)", "zz.txt: missing"]
    assert "no kernelrl-manifest.json" in verify_local(src)[0]
    # get_dir again repairs the copy (downloading only the damaged files)
    rec = Recorder()
    ckpt_store.get_dir("x", out, progress=rec)
    assert sorted(rec.which("downloaded")) == ["config.json", BIG, "zz.txt"]
    assert verify_local(out) == []


def test_ls_lists_only_complete_checkpoints(ckpt_store, tree):
    src, files = tree
    ckpt_store.put_dir(src, "runs/r1/sft/step-10")
    ckpt_store.put_dir(src, "runs/r2/sft/step-10")
    fail_on_nth_put(ckpt_store, 2)
    with pytest.raises(CheckpointError):
        ckpt_store.put_dir(src, "runs/r1/sft/step-20")
    del ckpt_store._put_file
    infos = ckpt_store.ls()
    assert [i.name for i in infos] == ["runs/r1/sft/step-10", "runs/r2/sft/step-10"]
    assert infos[0].files == len(files) and infos[0].bytes == sum(len(d) for d in files.values())
    assert infos[0].created_at
    assert [i.name for i in ckpt_store.ls("runs/r1/")] == ["runs/r1/sft/step-10"]
    assert ckpt_store.ls("nothing/") == []


def test_delete(ckpt_store, tree, tmp_path):
    src, _ = tree
    ckpt_store.put_dir(src, "runs/d/step-1")
    ckpt_store.put_dir(src, "runs/d/step-2")
    ckpt_store.delete("runs/d/step-1")
    assert not ckpt_store.exists("runs/d/step-1")
    assert ckpt_store._list_files("runs/d/step-1") == {}
    assert [i.name for i in ckpt_store.ls()] == ["runs/d/step-2"]
    with pytest.raises(CheckpointError, match="does not exist"):
        ckpt_store.get_dir("runs/d/step-1", tmp_path / "out")


@pytest.mark.parametrize("bad", ["", "/abs/path", "../up", "a/../b", "a//b", "a/./b", "a/", "a\\b",
                                 "C:/x", "a/kernelrl-manifest.json", "tab\there"])
def test_bad_names_rejected(ckpt_store, tree, tmp_path, bad):
    src, _ = tree
    with pytest.raises(CheckpointError, match="invalid checkpoint name"):
        ckpt_store.put_dir(src, bad)
    with pytest.raises(CheckpointError, match="invalid checkpoint name"):
        ckpt_store.exists(bad)
    with pytest.raises(CheckpointError, match="invalid checkpoint name"):
        ckpt_store.get_dir(bad, tmp_path / "out")
    assert not (tmp_path / "up").exists()


def test_nested_checkpoints_and_bad_source_rejected(ckpt_store, tree, tmp_path):
    src, _ = tree
    ckpt_store.put_dir(src, "runs/n/step-1")
    with pytest.raises(CheckpointError, match="inside the existing checkpoint 'runs/n/step-1'"):
        ckpt_store.put_dir(src, "runs/n/step-1/inner")
    with pytest.raises(CheckpointError, match="would contain the checkpoint 'runs/n/step-1'"):
        ckpt_store.put_dir(src, "runs/n")
    (src / "copy").mkdir()
    (src / "copy" / MANIFEST_NAME).write_text("{}")
    with pytest.raises(CheckpointError, match="invalid file path .*kernelrl-manifest.json is reserved"):
        ckpt_store.put_dir(src, "runs/n/step-3")
    with pytest.raises(CheckpointError, match="not a directory"):
        ckpt_store.put_dir(tmp_path / "missing", "runs/n/step-2")
    assert [i.name for i in ckpt_store.ls()] == ["runs/n/step-1"]


def test_s3_missing_bucket_is_a_clear_error(s3_server, tree):
    src, _ = tree
    store = s3_store(s3_server, "no-such-bucket-kernelrl")
    with pytest.raises(CheckpointError, match="NoSuchBucket"):
        store.put_dir(src, "x")


def test_open_checkpoint_store(s3_bucket, isolated_home, tree, tmp_path):
    from kernelrl.config.settings import Settings

    default = open_checkpoint_store()
    assert isinstance(default, LocalCheckpointStore)
    assert default.root == (isolated_home / "checkpoints").resolve()
    assert isinstance(open_checkpoint_store(str(tmp_path / "c")), LocalCheckpointStore)
    assert open_checkpoint_store(f"file://{tmp_path}/c").root == tmp_path / "c"
    with pytest.raises(ConfigError, match="unsupported scheme"):
        open_checkpoint_store("gs://bucket/x")

    endpoint, bucket = s3_bucket
    settings = Settings(checkpoint_uri=f"s3://{bucket}/team/ckpts", s3_endpoint_url=endpoint,
                        s3_access_key_id="AKIDSECRETTEST", s3_secret_access_key="very-secret-key")
    for store in (open_checkpoint_store(settings=settings), open_checkpoint_store(settings)):
        assert isinstance(store, S3CheckpointStore)
        assert store.uri("a/b") == f"s3://{bucket}/team/ckpts/a/b"
        assert "very-secret" not in repr(store)
    src, _ = tree
    store.put_dir(src, "a/b")
    assert [i.name for i in open_checkpoint_store(f"s3://{bucket}/team", settings).ls()] == ["ckpts/a/b"]
