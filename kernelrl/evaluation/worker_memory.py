"""Worker memory between phases (worker.py's ``trim`` command) and what an out-of-memory error reports: two
workers share one GPU, and the caching allocator keeps what a phase freed, where the other worker cannot use it."""

from __future__ import annotations

import gc

import torch

from kernelrl.evaluation.worker_share import release
from kernelrl.evaluation.worker_state import STATE, device


def cmd_trim(h, _tensors):
    """Between phases (session.trim, large sets only): drop the staged sets, a block's outputs and kept outputs,
    and give the allocator's cached memory back to the driver. Why: the caching allocator keeps what a phase
    freed, and the other worker on the same GPU cannot use it. On the H200 (bench/results/2026-11-28-h200x2-
    evaluator-v13d) four KernelBench self-pairs with 7-16 GiB inputs failed with out-of-memory: the reference's
    worker still held 69-83 GiB from calibration (four spans of one set each) while the candidate staged its
    timing block; the candidate's last kept correctness outputs (7 GiB) were also still alive. ``graphs``: the
    captured graphs too (with their input sets and outputs), when the side is timed eagerly from now on: after
    the trim above, six references whose replays were slower than their eager calls still failed on go holding
    70 GiB, their graphs beside their eager blocks; with the graphs dropped five of them scored 1.00."""
    STATE["staged"], STATE["round_outs"] = [], []
    if h.get("graphs"):
        STATE["graphs"] = None
    release()
    gc.collect()
    dev = device()
    before = after = peak = 0
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        before = torch.cuda.memory_reserved(dev)
        peak = reserved_peak(dev)
        torch.cuda.empty_cache()
        after = torch.cuda.memory_reserved(dev)
    return {"ok": True, "reserved_before": before, "reserved_after": after, "reserved_peak": peak}, []


def reserved_peak(dev: torch.device) -> int:
    """The most this worker's allocator has held so far: torch's counter, or what it read before forward_transient
    reset it."""
    return max(int(STATE.get("reserved_peak") or 0), torch.cuda.max_memory_reserved(dev))


def forward_transient(fn, dev: torch.device | None):
    """``fn()`` (one forward call) and the bytes it allocated at its peak beyond what it left allocated: the
    forward's own temporaries (KernelBench's masked cumsum: ``x * mask``, 4 GiB beside a 4 GiB output); 0 off a GPU
    or when not asked (``dev`` None).
    Calibration asks it of the reference's first call (calibrate.spans_for counts it once beside a block's sets:
    at version 23 that task kept two spans and its workers ran at 37 GiB each on an 80 GB H100, their allocators
    freeing and retrying mid-staging)."""
    if dev is None or dev.type != "cuda":
        return fn(), 0
    torch.cuda.synchronize(dev)
    STATE["reserved_peak"] = reserved_peak(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    out = fn()
    torch.cuda.synchronize(dev)
    return out, max(0, torch.cuda.max_memory_allocated(dev) - torch.cuda.memory_allocated(dev))


def held_summary() -> str:
    """An out-of-memory error's diagnosis: MiB of device tensors each harness state entry holds (staged sets,
    outputs, graphs, kept outputs; storages counted once), beside what the allocator has allocated."""
    seen: set[int] = set()

    def walk(x, depth=0) -> int:
        if isinstance(x, torch.Tensor):
            if x.device.type == "meta":
                return 0
            st = x.untyped_storage()
            if st.data_ptr() in seen:
                return 0
            seen.add(st.data_ptr())
            return st.nbytes()
        if depth > 4:
            return 0
        if isinstance(x, dict):
            return sum(walk(v, depth + 1) for v in x.values())
        if isinstance(x, (list, tuple)):
            return sum(walk(v, depth + 1) for v in x)
        return 0

    try:
        held = {key: walk(v) >> 20 for key, v in list(STATE.items())}
        out = ", ".join(f"{key} {mib}" for key, mib in held.items() if mib)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            out += f"; allocated {torch.cuda.memory_allocated() >> 20} MiB"
        return out or "nothing"
    except Exception as e:  # noqa: BLE001 - a diagnosis must not hide the error it diagnoses
        return f"unknown ({type(e).__name__})"


def cmd_bandwidth(h, _tensors):
    """Device memory bandwidth (bytes read + written per second) from a large device-to-device copy."""
    dev = device()
    if dev.type != "cuda":
        return {"ok": True, "bytes_per_s": None}, []
    a = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        b.copy_(a)
    end.record()
    torch.cuda.synchronize()
    secs = start.elapsed_time(end) / 1000
    return {"ok": True, "bytes_per_s": 2 * a.numel() * 10 / secs, "device_name": torch.cuda.get_device_name(dev)}, []
