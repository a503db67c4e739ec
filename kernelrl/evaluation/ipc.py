"""The wire between the trusted parent and its workers: a JSON header plus raw tensor bytes.

Nothing from a worker is ever unpickled: a message is ``[4-byte header length][header JSON][tensor bytes...]``
and tensors are rebuilt from (dtype, shape, bytes) with ``torch.frombuffer``. A hostile candidate can send
garbage, which fails to parse (a protocol error), but it cannot run code in the parent.

Large worker->parent payloads (``SIDE_MIN_BYTES`` and up: correctness outputs of gigabytes) skip the pipe: the
worker writes the tensor bytes into a memfd the parent gave it alone (``side_fd``; sandbox.WorkerProcess) and
sends only the header, marked ``"side": true``; the parent copies them out with ``preadv`` into its own buffers
and truncates the file. The parent never maps that file (the worker could truncate it under a mapping: SIGBUS).
"""

from __future__ import annotations

import json
import math
import os
import select
import struct
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# torch is imported where a tensor is built or read, not here: the parent starts its workers (sandbox.py, which
# imports this module) before it imports torch itself, so the two imports overlap (spares.prestart; the cold
# ``kernelrl eval``). A worker has imported torch before its first message.

MAX_HEADER = 16 * 1024 * 1024
MAX_PAYLOAD = 8 * 1024 * 1024 * 1024
# Messages whose tensors total this many bytes or more go through the side memfd. A pipe moves ~1 MB per
# read/write pair through the kernel's pipe buffer (two copies, a wake-up each: 1 GiB took 1.3-1.6 s on a 16-core
# H100 VM, 4-7 s on the 2-core CPU VM; a 6.4 GB softmax output crosses twice per correctness set); the memfd takes
# one pwrite and one preadv per tensor (0.9-1.4 s a GiB there: fresh pages are most of the cost).
# Small messages (every timed span's request and reply) stay on the pipe: one
# path for the latency-critical traffic, and no shared file to set up for kilobytes.
SIDE_MIN_BYTES = 64 * 1024 * 1024
SIDE_IO_BYTES = 256 * 1024 * 1024  # one pwrite/preadv moves at most this much (a partial write is retried anyway)
# After reading a side message the parent empties the file (its memory freed) unless this is True. Kept, the pages
# would serve the worker's next reply (its ftruncate to the new size frees any tail) with a copy instead of fresh
# pages, but stay allocated (up to the largest reply per worker) until the worker is closed. Measured on a 16-core
# H100 VM, 1 GiB a message: pipe 1.3-1.6 s, memfd freed 0.94-1.4 s, kept 0.88-1.1 s (the parent's own fresh
# buffer is the floor); not worth gigabytes held per worker. The side file holds one reply at a time: the protocol
# is strictly request then reply, so the worker never writes while the parent reads.
SIDE_KEEP_PAGES = False

_DTYPES: dict = {}


def dtypes() -> dict:
    """The dtypes the wire format knows, by name (``ipc.DTYPES``)."""
    if not _DTYPES:
        import torch

        _DTYPES.update({str(d).removeprefix("torch."): d for d in (
            torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
            torch.int64, torch.uint8, torch.bool, torch.complex64)})
    return _DTYPES


def __getattr__(name: str):  # PEP 562: ``from kernelrl.evaluation.ipc import DTYPES`` imports torch then
    if name == "DTYPES":
        return dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ProtocolError(RuntimeError):
    """The other side sent something that is not a valid message, or went away."""


class Timeout(RuntimeError):
    pass


class UnreadableOutput(RuntimeError):
    """A tensor to send could not be read to the host (a meta or sparse tensor, a CUDA-graph output that a later
    replay overwrote). Raised before any byte of the message reaches the pipe, so the channel stays in step and
    the sender can answer with an error instead of dying."""


def _readable(t: torch.Tensor) -> tuple[dict, memoryview | bytes]:
    try:
        return tensor_to_bytes(t)
    except Exception as e:  # noqa: BLE001 - whatever the tensor raises, the message is not started
        raise UnreadableOutput(f"{type(e).__name__}: {str(e)[:600]}") from e


def tensor_to_bytes(t: torch.Tensor) -> tuple[dict, memoryview | bytes]:
    """(meta, raw bytes): the bytes are a view of the tensor's own (host, contiguous) memory, not a copy."""
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    meta = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
    if t.numel() == 0:
        return meta | {"nbytes": 0}, b""
    raw = memoryview(t.reshape(-1).view(torch.uint8).numpy()).cast("B")
    return meta | {"nbytes": raw.nbytes}, raw


def bytes_to_tensor(meta: dict, raw: bytes) -> torch.Tensor:
    import torch

    dtype = dtypes().get(meta.get("dtype"))
    if dtype is None:
        raise ProtocolError(f"unsupported dtype {meta.get('dtype')!r}")
    shape = [int(s) for s in meta["shape"]]
    if not len(raw):
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(raw if isinstance(raw, bytearray) else bytearray(raw), dtype=dtype).reshape(shape)


F_SETPIPE_SZ = 1031
PIPE_BYTES = 1 << 20  # the unprivileged maximum (/proc/sys/fs/pipe-max-size): 16x fewer syscalls than 64 KB


def widen_pipe(fd: int) -> None:
    """Best effort: a 1 MB pipe buffer (outputs of many MB cross in 16x fewer reads and writes)."""
    try:
        import fcntl

        fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
    except (OSError, ImportError):
        pass


def _pwrite_all(fd: int, data, offset: int) -> None:
    view = memoryview(data).cast("B")
    while view:
        n = os.pwrite(fd, view[:SIDE_IO_BYTES], offset)
        if n <= 0:
            raise OSError("pwrite wrote nothing")
        view, offset = view[n:], offset + n


def _pread_all(fd: int, n: int, offset: int) -> bytearray:
    """n bytes at ``offset`` into a fresh buffer; a short file (the worker truncated it) is a ProtocolError."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = os.preadv(fd, [view[got:got + SIDE_IO_BYTES]], offset + got)
        if k <= 0:
            raise ProtocolError(f"the side file ended {n - got} bytes early")
        got += k
    return buf


def _payload_sizes(metas) -> list[int]:
    """Each tensor's declared byte count, checked: a list of objects, non-negative counts, at most MAX_PAYLOAD."""
    if not isinstance(metas, list):
        raise ProtocolError("bad tensor list")
    sizes, total = [], 0
    for meta in metas:
        try:
            nbytes = int(meta.get("nbytes", 0))
        except (AttributeError, TypeError, ValueError):
            raise ProtocolError("bad tensor metadata") from None
        total += nbytes
        if nbytes < 0 or total > MAX_PAYLOAD:
            raise ProtocolError("payload too large")
        sizes.append(nbytes)
    return sizes


class Channel:
    """One direction in, one out, over raw file descriptors (blocking writes, reads with a deadline), and an
    optional side memfd (``side_fd``) for large payloads of the worker's replies (see the module's docstring);
    ``side_min_bytes``: the sender's threshold for it (the parent picks it for its workers: worker.main)."""

    def __init__(self, fd_in: int, fd_out: int, side_fd: int | None = None, side_min_bytes: int | None = None):
        self.fd_in = fd_in
        self.fd_out = fd_out
        self.side_fd = side_fd
        self.side_min_bytes = SIDE_MIN_BYTES if side_min_bytes is None else side_min_bytes
        widen_pipe(fd_out)

    def send(self, header: dict[str, Any], tensors: list[torch.Tensor] | None = None) -> None:
        tensors = list(tensors or [])
        if self.side_fd is not None and tensors:
            total = sum(t.numel() * t.element_size() for t in tensors)
            if total >= self.side_min_bytes and self._send_side(header, tensors, total):
                return
        metas, blobs = [], []
        for t in tensors or []:
            m, b = _readable(t)
            metas.append(m)
            blobs.append(b)
        head = json.dumps(dict(header, tensors=metas)).encode()
        data = struct.pack("<I", len(head)) + head
        self._write(data)
        for b in blobs:
            self._write(b)

    def reply(self, header: dict[str, Any], tensors: list[torch.Tensor], fault: dict[str, Any]) -> None:
        """A worker's answer; when one of its tensors cannot be read (UnreadableOutput: nothing was sent yet), an
        error answer instead (``fault`` and the reason), so the worker keeps serving rather than dying mid-protocol."""
        try:
            self.send(header, tensors)
        except UnreadableOutput as e:
            import traceback

            # the host copy itself may run out of memory: the parent's out-of-memory flag, not a runtime error
            oom = isinstance(e.__cause__, MemoryError) or "out of memory" in str(e).lower() \
                or "can't allocate memory" in str(e).lower()
            self.send(dict(fault, ok=False, kind="OutOfMemory" if oom else "RuntimeError",
                           traceback=traceback.format_exc()[-3000:], error=f"{fault.get('error', '')}{e}"))

    def _send_side(self, header: dict[str, Any], tensors: list[torch.Tensor], total: int) -> bool:
        """The tensors' bytes into the side file, one after the other from offset 0, then the header (with their
        metadata, ``side``) through the pipe. A tensor is converted (device to host) just before its write and
        dropped after it, so at most one host copy exists here beside the file. False (nothing sent) when the
        file cannot take them (out of memory, a size limit): the caller sends through the pipe."""
        metas, off = [], 0
        try:
            os.ftruncate(self.side_fd, total)
            for t in tensors:
                m, raw = _readable(t)
                _pwrite_all(self.side_fd, raw, off)
                off += m["nbytes"]
                metas.append(m)
                del raw
        except OSError:
            try:
                os.ftruncate(self.side_fd, 0)
            except OSError:
                pass
            return False
        head = json.dumps(dict(header, tensors=metas, side=True)).encode()
        self._write(struct.pack("<I", len(head)) + head)
        return True

    def _write(self, data) -> None:
        view = memoryview(data).cast("B")
        while view:
            n = os.write(self.fd_out, view)
            view = view[n:]

    def _read_into(self, n: int, deadline: float | None) -> bytearray:
        """n bytes read straight into one buffer (no chunk list, no join, no copy for a tensor), each read waiting
        no later than ``deadline``."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Timeout("timed out waiting for the worker")
                r, _, _ = select.select([self.fd_in], [], [], left)
                if not r:
                    raise Timeout("timed out waiting for the worker")
            k = os.readv(self.fd_in, [view[got:]])
            if not k:
                raise ProtocolError("the worker closed its channel")
            got += k
        return buf

    def spin_until_readable(self, spin_s: float) -> bool:
        """Busy-poll the channel for up to ``spin_s`` seconds (zero-timeout selects, no sleeping): True as soon
        as a message is waiting. A process blocked in a read is woken by the scheduler, which on a virtual
        machine costs tens of microseconds and varies from wake-up to wake-up; a spinning one sees the bytes
        within a microsecond or two. Used around the timed spans only (both ends), where that jitter lands on
        the clock; everywhere else the channel blocks."""
        end = time.perf_counter() + spin_s
        fds = [self.fd_in]
        while True:
            r, _, _ = select.select(fds, [], [], 0)
            if r:
                return True
            if time.perf_counter() >= end:
                return False

    def recv(self, timeout: float | None = None, spin_s: float = 0.0) -> tuple[dict[str, Any], list[torch.Tensor]]:
        """One message. ``spin_s``: busy-poll that long before falling back to a blocking wait (see
        ``spin_until_readable``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if spin_s > 0:
            self.spin_until_readable(spin_s if timeout is None else min(spin_s, timeout))
        (n,) = struct.unpack("<I", self._read_into(4, deadline))
        if n > MAX_HEADER:
            raise ProtocolError(f"header of {n} bytes")
        try:
            header = json.loads(self._read_into(n, deadline))
        except (ValueError, UnicodeDecodeError) as e:
            raise ProtocolError(f"bad header: {e}") from None
        if not isinstance(header, dict):
            raise ProtocolError("header is not an object")
        metas = header.get("tensors") or []
        sizes = _payload_sizes(metas)
        if header.get("side"):
            return header, self._recv_side(metas, sizes)
        tensors = []
        for meta, nbytes in zip(metas, sizes):
            tensors.append(_rebuild(meta, self._read_into(nbytes, deadline) if nbytes else b""))
        return header, tensors

    def _recv_side(self, metas: list, sizes: list[int]) -> list[torch.Tensor]:
        """The tensors of a ``side`` message, copied out of the side file (never mapped: the worker could shrink
        it under a mapping and SIGBUS us); then the file is emptied (its memory freed) unless SIDE_KEEP_PAGES, and
        always after a bad message."""
        if self.side_fd is None:
            raise ProtocolError("a side-file message, but this channel has no side file")
        ok = False
        try:
            have = os.fstat(self.side_fd).st_size
            if have < sum(sizes):
                raise ProtocolError(f"the side file holds {have} bytes, the message declares {sum(sizes)}")
            tensors, off = [], 0
            for meta, nbytes in zip(metas, sizes):
                tensors.append(_rebuild(meta, _pread_all(self.side_fd, nbytes, off) if nbytes else b""))
                off += nbytes
            ok = True
            return tensors
        finally:
            if not (ok and SIDE_KEEP_PAGES):
                try:
                    os.ftruncate(self.side_fd, 0)
                except OSError:
                    pass


def _rebuild(meta: dict, raw) -> torch.Tensor:
    """bytes_to_tensor, with metadata that does not fit its bytes (shape x dtype != nbytes: a huge shape with no
    bytes would make us allocate it) a ProtocolError."""
    try:
        dtype = dtypes().get(meta.get("dtype"))
        if dtype is not None and math.prod(int(s) for s in meta["shape"]) * dtype.itemsize != len(raw):
            raise ProtocolError(f"tensor metadata {meta} does not fit its {len(raw)} bytes")
        return bytes_to_tensor(meta, raw)
    except ProtocolError:
        raise
    except (RuntimeError, ValueError, TypeError, KeyError) as e:
        raise ProtocolError(f"bad tensor metadata: {e}") from None
