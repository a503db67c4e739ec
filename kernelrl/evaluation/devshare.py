"""CUDA IPC through the driver API (ctypes on libcuda): a worker exports a device tensor's memory as a handle, another
process of the same GPU maps it and reads it in place. Correctness of outputs of gigabytes (KernelBench's softmax:
6.4 GB a set) is decided on the device this way (worker_share.py): nothing crosses the host.

Only the legacy IPC handles (cuIpcGetMemHandle / cuIpcOpenMemHandle) are used: memory from cudaMalloc, which is what
PyTorch's caching allocator holds unless ``expandable_segments`` is on (then export fails and the caller falls back
to shipping through the host). Everything here runs inside a worker; nothing is imported by the parent."""

from __future__ import annotations

import ctypes
import math

import torch

from kernelrl.evaluation.ipc import DTYPES  # the dtypes the wire format knows

HANDLE_BYTES = 64  # sizeof(CUipcMemHandle)
# cuIpcOpenMemHandle's flag: enable peer access lazily (required value; one device here, so never used).
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1



class ShareError(RuntimeError):
    """IPC is not available here, or an export/descriptor is not valid."""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


def handle_hex(h: _Handle) -> str:
    """The whole 64-byte handle as hex (not ``h.reserved``: a c_char array reads as bytes cut at the first NUL)."""
    return bytes(h).hex()


def handle_from_hex(hx: str) -> _Handle:
    try:
        raw = bytes.fromhex(hx)
    except ValueError:
        raise ShareError("malformed handle") from None
    if len(raw) != HANDLE_BYTES:
        raise ShareError("malformed handle")
    return _Handle.from_buffer_copy(raw)


_lib = None


def _cu():
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise ShareError(f"libcuda not loadable: {e}") from None
        lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                                                ctypes.c_uint64]
        lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_Handle), ctypes.c_uint64]
        lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), _Handle, ctypes.c_uint]
        lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
        _lib = lib
    return _lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise ShareError(f"{what} failed (CUresult {rc})")


def _context(dev: torch.device) -> None:
    """The device's primary context current on this thread, as the driver calls need: torch's runtime calls make it
    current when they first touch the device (an allocation does), not when the device is merely selected (an
    H200 process that had run nothing there got CUDA_ERROR_INVALID_CONTEXT, 201, from cuIpcOpenMemHandle). The
    device is made current first (a worker already has it so: worker_load sets it), so the context is this one's."""
    if dev.index is not None:
        torch.cuda.set_device(dev)
    torch.zeros(1, device=dev)


def _range(ptr: int) -> tuple[int, int]:
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(_cu().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)),
           "cuMemGetAddressRange")
    return base.value, size.value


def export(t: torch.Tensor) -> dict:
    """A descriptor of ``t``'s memory (contiguous, on a CUDA device) another process can map with open_view:
    the handle of the allocation holding it, the offset into it, and the tensor's dtype, shape and bytes."""
    if t.device.type != "cuda" or not t.is_contiguous():
        raise ShareError("only contiguous CUDA tensors are exported")
    _context(t.device)
    nbytes = t.numel() * t.element_size()
    meta = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "nbytes": nbytes}
    if nbytes == 0:
        return meta | {"handle": "", "offset": 0}
    base, _ = _range(t.data_ptr())
    h = _Handle()
    _check(_cu().cuIpcGetMemHandle(ctypes.byref(h), ctypes.c_uint64(base)), "cuIpcGetMemHandle")
    return meta | {"handle": handle_hex(h), "offset": t.data_ptr() - base}


class _CudaArray:
    """A raw device byte range as an object torch.as_tensor maps without copying (__cuda_array_interface__)."""

    def __init__(self, ptr: int, nbytes: int):
        # read-only is False: torch refuses the flag ("the read only flag is not supported"); we only read it
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None}


class Opened:
    """The handles one request mapped (each once: outputs of one allocation share its handle); close() unmaps them.
    Views made by view() must be dropped before close()."""

    def __init__(self, dev: torch.device):
        self.dev = dev
        self.maps: dict[str, tuple[int, int]] = {}  # handle hex -> (mapped base, size)

    def view(self, desc: dict) -> torch.Tensor:
        """The exported tensor, read in place (a validated descriptor: the bytes must lie inside the mapping)."""
        try:
            dtype = DTYPES[desc["dtype"]]
            shape = [int(s) for s in desc["shape"]]
            nbytes, offset, hx = int(desc["nbytes"]), int(desc["offset"]), str(desc["handle"])
        except (KeyError, TypeError, ValueError) as e:
            raise ShareError(f"malformed descriptor ({type(e).__name__})") from None
        itemsize = torch.empty(0, dtype=dtype).element_size()
        if any(s < 0 for s in shape) or nbytes != math.prod(shape) * itemsize or offset < 0:
            raise ShareError("descriptor's bytes do not match its shape and dtype")
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype, device=self.dev)
        if hx not in self.maps:
            h, ptr = handle_from_hex(hx), ctypes.c_uint64()
            _context(self.dev)
            _check(_cu().cuIpcOpenMemHandle_v2(ctypes.byref(ptr), h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                   "cuIpcOpenMemHandle")
            try:
                base, size = _range(ptr.value)
            except ShareError:
                _cu().cuIpcCloseMemHandle(ptr)
                raise
            self.maps[hx] = (ptr.value, size - (ptr.value - base))
        ptr, size = self.maps[hx]
        if offset + nbytes > size:
            raise ShareError(f"descriptor reaches past its allocation ({offset + nbytes} > {size} bytes)")
        if offset % itemsize:
            raise ShareError("misaligned descriptor")
        try:
            flat = torch.as_tensor(_CudaArray(ptr + offset, nbytes), device=self.dev)
            return flat.view(dtype).view(shape)
        except (TypeError, RuntimeError, ValueError) as e:  # our side of the mapping: never the reference's failure
            raise ShareError(f"mapped memory not usable as a tensor ({type(e).__name__}: {str(e)[:200]})") from None

    def close(self) -> None:
        torch.cuda.synchronize(self.dev)  # every read of the mapped memory done before it is unmapped
        for ptr, _ in self.maps.values():
            _cu().cuIpcCloseMemHandle(ctypes.c_uint64(ptr))
        self.maps.clear()
