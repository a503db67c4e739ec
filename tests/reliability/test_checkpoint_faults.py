"""Checkpoint faults: the S3 server dies mid-sync, the local disk fills up, a stored file rots.

In every case the store raises CheckpointError, no manifest points at a partial checkpoint, and the next sync
completes by sending only what is missing.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

import kernelrl.checkpoints.base as base
from kernelrl.checkpoints import MANIFEST_NAME, LocalCheckpointStore, verify_local
from kernelrl.checkpoints.base import TMP_MARK
from kernelrl.errors import CheckpointError
from tests.fixtures_s3 import s3_client, start_moto_server, stop_moto_server
from tests.test_checkpoints import BIG, Recorder, make_tree, read_tree, s3_store

MiB = 1 << 20


@pytest.fixture
def own_server(s3_server):  # s3_server: for the session's dummy AWS credentials
    """A moto server of this test's own, to kill and bring back on the same port (moto's state is
    process-global, so what was stored before the outage is still there afterwards, as on a real server)."""
    state = {}
    state["server"], state["endpoint"] = start_moto_server()
    state["port"] = state["server"].get_host_and_port()[1]
    s3_client(state["endpoint"]).create_bucket(Bucket="faults")

    def kill():
        stop_moto_server(state["server"])

    def restart():
        state["server"], _ = start_moto_server(state["port"])

    state["kill"], state["restart"] = kill, restart
    yield state
    stop_moto_server(state["server"])


def assert_complete(store, name, files, tmp_path):
    m = store.manifest(name)
    assert {f.path: f.size for f in m.files} == {k: len(v) for k, v in files.items()}
    out = store.get_dir(name, tmp_path / "check")
    got = read_tree(out)
    got.pop(MANIFEST_NAME)
    assert got == files and verify_local(out) == []


def test_s3_server_stopped_between_files_then_resumed(own_server, tmp_path):
    src = tmp_path / "src"
    files = make_tree(src)
    order = sorted(files)
    store = s3_store(own_server["endpoint"], "faults")
    name = "runs/f/step-1"

    def progress(rel, action, size):
        if rel == order[1]:
            own_server["kill"]()  # the endpoint goes away after two files are stored

    with pytest.raises(CheckpointError, match=f"writing {order[2]} .*rerun to resume"):
        store.put_dir(src, name, progress=progress)
    for call in (lambda: store.exists(name), store.ls, lambda: store.get_dir(name, tmp_path / "o")):
        with pytest.raises(CheckpointError, match="Could not connect"):  # clear errors while it is down
            call()

    own_server["restart"]()
    assert not store.exists(name) and store.ls() == []
    assert set(store._list_files(name)) == set(order[:2])

    rec = Recorder()
    store.put_dir(src, name, progress=rec)
    assert rec.which("skipped") == order[:2] and rec.which("uploaded") == order[2:]
    assert_complete(store, name, files, tmp_path)


def test_s3_server_stopped_during_multipart_upload(own_server, tmp_path):
    src = tmp_path / "src"
    files = make_tree(src, big_size=11 * MiB)  # 3 parts of <= 5 MiB
    store = s3_store(own_server["endpoint"], "faults")
    name = "runs/f/step-2"
    parts = []
    lock = threading.Lock()

    def on_upload_part(**kwargs):
        with lock:
            parts.append(1)
            if len(parts) == 2:  # kill the server just before the 2nd part leaves
                own_server["kill"]()

    store.client.meta.events.register("before-send.s3.UploadPart", on_upload_part)
    with pytest.raises(CheckpointError, match=f"writing {BIG}"):
        store.put_dir(src, name)
    store.client.meta.events.unregister("before-send.s3.UploadPart", on_upload_part)

    own_server["restart"]()
    client = s3_client(own_server["endpoint"])
    key = f"ckpts/{name}"
    keys = {o["Key"] for o in client.list_objects_v2(Bucket="faults", Prefix=key).get("Contents", [])}
    assert keys == {f"{key}/config.json", f"{key}/model/sub/a.txt"}, "a half-sent multipart upload is no object"
    assert not store.exists(name)

    rec = Recorder()
    store.put_dir(src, name, progress=rec)
    assert BIG in rec.which("uploaded")
    assert client.head_object(Bucket="faults", Key=f"{key}/{BIG}")["ETag"].strip('"').endswith("-3")
    assert_complete(store, name, files, tmp_path)


class FullDisk:
    """Replaces the one local write seam: accepts `capacity` bytes in all, then fails with ENOSPC."""

    def __init__(self, capacity: int):
        self.left = capacity

    def __call__(self, fh, data: bytes) -> None:
        if len(data) > self.left:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.left -= len(data)
        fh.write(data)


def leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if TMP_MARK in p.name]


@pytest.mark.parametrize("where", ["in a file", "writing the manifest"])
def test_local_disk_full(tmp_path, monkeypatch, where):
    src = tmp_path / "src"
    files = make_tree(src)
    order = sorted(files)
    store = LocalCheckpointStore(tmp_path / "store")
    name = "runs/full/step-1"
    room = sum(len(files[r]) for r in order[:2]) if where == "in a file" else sum(map(len, files.values()))
    monkeypatch.setattr(base, "_write_chunk", FullDisk(room))

    with pytest.raises(CheckpointError, match="no space left on device") as ei:
        store.put_dir(src, name)
    assert "no manifest was written" in str(ei.value)
    if where == "in a file":
        assert order[2] in str(ei.value)
    assert not store.exists(name) and store.ls() == []
    assert not (store.path(name) / MANIFEST_NAME).exists()
    assert leftovers(store.root) == []

    monkeypatch.undo()  # space freed
    rec = Recorder()
    store.put_dir(src, name, progress=rec)
    expect_skipped = order[:2] if where == "in a file" else order
    assert rec.which("skipped") == expect_skipped
    assert_complete(store, name, files, tmp_path)


def test_local_disk_full_while_downloading(tmp_path, monkeypatch):
    src = tmp_path / "src"
    make_tree(src)
    store = LocalCheckpointStore(tmp_path / "store")
    store.put_dir(src, "c")
    monkeypatch.setattr(base, "_write_chunk", FullDisk(1 * MiB))
    out = tmp_path / "out"
    with pytest.raises(CheckpointError, match="no space left on device while downloading"):
        store.get_dir("c", out)
    assert not (out / MANIFEST_NAME).exists() and leftovers(out) == []
    assert verify_local(out)  # an incomplete copy is never taken for a whole one


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "delete"])
def test_corrupt_local_checkpoint_detected(tmp_path, damage):
    src = tmp_path / "src"
    make_tree(src)
    store = LocalCheckpointStore(tmp_path / "store")
    store.put_dir(src, "runs/rot/step-1")
    victim = store.path("runs/rot/step-1") / BIG
    if damage == "flip a byte":
        data = bytearray(victim.read_bytes())
        data[12345] ^= 0xFF
        victim.write_bytes(bytes(data))
    elif damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:-1])
    else:
        victim.unlink()
    problems = verify_local(store.path("runs/rot/step-1"))
    assert len(problems) == 1 and problems[0].startswith(BIG)
    with pytest.raises(CheckpointError, match=f"{BIG}"):
        store.get_dir("runs/rot/step-1", tmp_path / "out")
