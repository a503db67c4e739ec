"""A CUDA worker's device context, made in a thread while the worker imports torch (inside the worker process,
kernelrl/evaluation/worker.py; this module imports no torch).

Why: a worker's start (interpreter, torch's import, the device context) is the longest path of the cold ``kernelrl
eval`` before calibration, and the context came after the import: 4.75 s for both on the H100 host of 2026-12-07,
where the command for a level-1 self-pair took 12.2-13.3 s against the 12 s goal
(bench/results/2026-12-06-h100-kernelbench, c20). The driver's part of the context (``cuInit``, the device's
primary context) needs no torch, and ctypes releases the GIL while the driver works, so the two overlap. torch then
finds the primary context made (the runtime uses it) and only attaches to it.

The parent names the device at spawn (``ENV``: its index, as torch numbers it under the worker's
CUDA_VISIBLE_DEVICES, which the driver's ordinal is; sandbox.WorkerProcess sets it for CUDA workers unless
``KERNELRL_EARLY_CONTEXT=0`` is in the parent's environment, the switch for A/B timing). The scheduling flag the
reference and candidate workers need (BLOCKING_SYNC, worker_load.schedule_blocking_sync) is set here first, before
the context exists, exactly as that function sets it; it then takes this result instead of setting it again.
Nothing of the task or candidate exists yet when this runs.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time

ENV = "KERNELRL_EARLY_CONTEXT"  # the device index (parent -> worker); "0" in the parent's environment: off
CU_CTX_SCHED_BLOCKING_SYNC = 0x04
RESULT: dict = {}
_THREAD: list[threading.Thread] = []


def for_worker(device: str) -> dict[str, str]:
    """The parent's side: what a worker on ``device`` gets in its environment at spawn ({} off CUDA, or when the
    parent's own environment says ``KERNELRL_EARLY_CONTEXT=0``)."""
    if not device.startswith("cuda") or os.environ.get(ENV) == "0":
        return {}
    _, _, index = device.partition(":")
    return {ENV: index or "0"}


def begin() -> None:
    """Start the context's thread when the parent named a device (``ENV``); once per process. The variable is
    removed from the environment first, so nothing started later inherits it."""
    index = os.environ.pop(ENV, None)
    if index is None or _THREAD:
        return
    try:
        idx = int(index)
    except ValueError:
        RESULT["error"] = f"{ENV}={index!r} is not a device index"
        return
    blocking = os.environ.get("KERNELRL_BLOCKING_SYNC") == "1"
    # read at cuInit: torch sets it when it initialises CUDA, which now comes after the thread's cuInit (drivers
    # before CUDA 12.2 default to loading every kernel module with the context)
    os.environ.setdefault("CUDA_MODULE_LOADING", "LAZY")
    t = threading.Thread(target=_make, args=(idx, blocking), name="kernelrl-context", daemon=True)
    try:
        t.start()
    except RuntimeError as e:  # no thread to be had (a pids limit): torch makes the context itself, as before
        RESULT["error"] = f"no context thread: {e}"
        return
    _THREAD.append(t)


def _make(index: int, blocking: bool) -> None:
    t0 = time.monotonic()
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        rc = lib.cuInit(0)
        if rc != 0:
            RESULT["error"] = f"cuInit: CUresult {rc}"
            return
        dev = ctypes.c_int()
        rc = lib.cuDeviceGet(ctypes.byref(dev), index)
        if rc != 0:
            RESULT["error"] = f"cuDeviceGet({index}): CUresult {rc}"
            return
        if blocking:  # before the context exists, as worker_load.schedule_blocking_sync would
            RESULT["sched"] = set_blocking_sync(lib, dev)
        ctx = ctypes.c_void_p()
        rc = lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
        RESULT["retained"] = rc == 0
        if rc != 0:
            RESULT["error"] = f"cuDevicePrimaryCtxRetain: CUresult {rc}"
    except (OSError, AttributeError) as e:  # no driver here: torch makes its context as before (or fails as before)
        RESULT["error"] = f"{type(e).__name__}: {e}"[:300]
    finally:
        RESULT["s"] = round(time.monotonic() - t0, 3)


def set_blocking_sync(lib, dev) -> str:
    """CU_CTX_SCHED_BLOCKING_SYNC on device ``dev``'s primary context (``lib``: libcuda, initialised), before the
    context exists; what the worker got: "blocking", or "default (CUresult N)". The one place the flag is set
    (this module's thread, or worker_load.schedule_blocking_sync where no thread ran)."""
    fn = getattr(lib, "cuDevicePrimaryCtxSetFlags_v2", None) or lib.cuDevicePrimaryCtxSetFlags
    rc = fn(dev, CU_CTX_SCHED_BLOCKING_SYNC)
    return "blocking" if rc == 0 else f"default (CUresult {rc})"


def report(r) -> dict | None:
    """A worker's ``context`` reply (its warm-up's: before any task or candidate code ran in it) as the parent
    records it: the known keys with values of their kind, nothing else."""
    if not isinstance(r, dict):
        return None
    kinds = {"s": (int, float), "retained": bool, "sched": str, "error": str}
    return {k: (v[:200] if isinstance(v, str) else v) for k, v in r.items()
            if k in kinds and isinstance(v, kinds[k])}


def wait(timeout: float = 120.0) -> dict:
    """The thread's result once it ended (at most ``timeout`` s): {"s": seconds it took, "retained": bool, "sched":
    the flag it set (blocking workers only), "error": why not}; {} when no thread was started. Called before the
    worker's first CUDA call, so torch never makes a context beside the thread's."""
    if _THREAD:
        _THREAD[0].join(timeout)
        if _THREAD[0].is_alive():
            return {"error": f"not done after {timeout} s"}
    return {k: v for k, v in RESULT.items()}
