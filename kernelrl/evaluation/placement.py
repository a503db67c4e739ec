"""Where an evaluation's processes run and how much they may stage: the timing cores of each GPU (one physical
core's threads, nothing placed beside them), the spare cores where workers start and candidates build, the
parent thread kept off the timing cores while it busy-polls, and the host's (or container's) free memory."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import psutil


# Pin both workers of an evaluation to one CPU core (they never run at once): launch-bound GPU kernels and CPU kernels
# are then timed on the same core, not on whichever cores the OS picked for two processes (seen on an H100 host: the
# same launch-bound candidate 14-27 us per call across processes).
PIN_CPU = True


_PIN_LOCK = threading.Lock()


_PIN_NEXT = [0]


def _avail_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return []


def _gpu_count() -> int:
    from kernelrl.config.devices import cuda_device_count  # without importing torch (spares.prestart)

    return cuda_device_count()


def _siblings(cpu: int, root: str = "/sys/devices/system/cpu") -> frozenset[int]:
    """The hardware threads sharing ``cpu``'s physical core (itself included; just itself without SMT or sysfs)."""
    try:
        text = Path(root, f"cpu{cpu}", "topology", "thread_siblings_list").read_text().strip()
    except OSError:
        return frozenset({cpu})
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        try:
            out.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            return frozenset({cpu})
    return frozenset(out | {cpu})


def _gpu_timing_sets(avail: list[int], n_gpus: int, root: str = "/sys/devices/system/cpu") -> list[set[int]]:
    """One set of cores per GPU (index order), from the top of ``avail``: two cores each, and with SMT both threads
    of one physical core, so no busy-poll of the parent or the holder runs on a sibling thread of a timed worker.
    (A guess at why the same harness code took 1.3-2x the CPU time in one worker as in the other for a whole
    evaluation on the H100 VM, 2026-11-26 v8 call 1; that VM has no SMT, so there it changes nothing and the
    cause is still open.) Empty when the cores do not suffice (at least two cores must stay for everything else)."""
    if len(avail) < 2 * n_gpus + 2:
        return []
    sib = {c: _siblings(c, root) for c in avail}
    smt = any(len(v) > 1 for v in sib.values())
    left = list(avail)
    sets: list[set[int]] = []
    for _ in range(n_gpus):
        pick = next((set(sib[c]) for c in reversed(left) if len(sib[c]) == 2 and sib[c] <= set(left)), None) \
            if smt else None
        if pick is None:
            pick = set(left[-2:])
        sets.append(pick)
        left = [c for c in left if c not in pick]
        if len(left) < 2:
            return []
    return sets


def timing_cores(device: str) -> set[int] | None:
    """The cores both workers of one evaluation are pinned to while they are timed (they never run at once, so
    launch-bound kernels of both sides are timed on the same cores' speed). cuda:N gets the N-th set from the top
    of the cores this process may use (one evaluation per GPU, clear of core 0 where the OS and the parent tend
    to run): two cores, so the CUDA driver's helper threads do not preempt the launching thread, and with SMT the
    two threads of one physical core (``_gpu_timing_sets``). CPU evaluations get one core each, every core in
    turn from the top (concurrent evaluations spread out). None when there are too few cores."""
    avail = _avail_cores()
    if device.startswith("cuda"):
        return _gpu_set(avail, device)
    if len(avail) < 2:
        return None
    with _PIN_LOCK:
        idx = _PIN_NEXT[0]
        _PIN_NEXT[0] += 1
    return {avail[-1 - idx % len(avail)]}  # every core in turn: two evaluations at once on 2 cores get one each


def pins(device: str) -> bool:
    """Whether an evaluation on ``device`` pins its workers (PIN_CPU and timing cores exist: ``timing_cores`` is
    not None), without taking a CPU core's turn as ``timing_cores`` does: its workers then start on
    ``spare_cores()``, part of the key a spare worker is found by (spares.worker_kwargs)."""
    if not PIN_CPU:
        return False
    avail = _avail_cores()
    if device.startswith("cuda"):
        return _gpu_set(avail, device) is not None
    return len(avail) >= 2


def _gpu_set(avail: list[int], device: str) -> set[int] | None:
    """cuda:N's timing cores (the N-th of ``_gpu_timing_sets``), or None when the cores do not suffice."""
    idx = int(device.split(":")[1]) if ":" in device else 0
    sets = _gpu_timing_sets(avail, max(_gpu_count(), idx + 1))
    return sets[idx] if idx < len(sets) else None


def spare_cores() -> set[int] | None:
    """Where workers start and build (imports, nvcc) on a GPU host: every core but the GPUs' timing sets (and
    their sibling threads), so a spare starting in the background never competes with an evaluation being timed."""
    avail = _avail_cores()
    sets = _gpu_timing_sets(avail, max(_gpu_count(), 1))  # empty: fewer than two cores would be left anyway
    taken = set().union(*sets)
    keep = [c for c in avail if c not in taken]
    return set(keep) if sets and len(keep) >= 2 else None


def _cgroup_free_bytes() -> int | None:
    """Bytes this process's cgroup may still use (its limit minus what it holds that cannot be reclaimed), or
    None without a limit. Inside a container the limit is the container's, which psutil's host-wide view does
    not show. Page cache (torch's libraries, read once) counts in the cgroup's usage but is given back under
    pressure, so it is not counted as held; tmpfs pages (shmem) are."""
    for base, (lim_f, use_f), (file_k, shmem_k) in (
            ("/sys/fs/cgroup", ("memory.max", "memory.current"), ("file", "shmem")),
            ("/sys/fs/cgroup/memory", ("memory.limit_in_bytes", "memory.usage_in_bytes"),
             ("total_cache", "total_shmem"))):
        try:
            raw = Path(base, lim_f).read_text().strip()
            used = int(Path(base, use_f).read_text().strip())
            stat = dict(line.split() for line in Path(base, "memory.stat").read_text().splitlines()
                        if len(line.split()) == 2)
        except (OSError, ValueError):
            continue
        if raw == "max" or not raw.isdigit() or int(raw) >= 1 << 60:  # v1 writes a huge number for "no limit"
            return None
        reclaimable = max(0, int(stat.get(file_k, 0)) - int(stat.get(shmem_k, 0)))
        return max(0, int(raw) - max(0, used - reclaimable))
    return None


def host_free_bytes() -> int:
    """Memory this process can still take: the host's available memory, or less under a cgroup limit."""
    free = psutil.virtual_memory().available
    cg = _cgroup_free_bytes()
    return min(free, cg) if cg is not None else free


def pin_threads(pid: int, cpus: set[int] | None) -> None:
    """Move every thread of a running worker onto ``cpus`` (affinity is per thread; new threads inherit it)."""
    if not cpus:
        return
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass


def keep_off_cores(cpus: set[int] | None) -> set[int] | None:
    """Move the calling thread off ``cpus`` (the timing cores of its evaluation, where its parent-side busy-polls
    would compete with the worker being timed). Returns the previous affinity for ``restore_affinity``, or None
    when nothing changed (no pinning, or no other core to go to)."""
    if not cpus:
        return None
    try:
        before = os.sched_getaffinity(0)  # pid 0: this thread
        rest = before - set(cpus)
        if not rest or rest == before:
            return None
        os.sched_setaffinity(0, rest)
        return before
    except (AttributeError, OSError):
        return None


def restore_affinity(saved: set[int] | None) -> None:
    if saved:
        try:
            os.sched_setaffinity(0, saved)
        except OSError:
            pass
