"""The held clock (``EvalConfig.clock = "held"``, CUDA): a trusted holder process times each side's GPU work.

Why: on the H100 VM the parent's clock around a span (the host clock) moved launch-bound ratios by 16-46% between
evaluations, because the host's dispatch speed changed for seconds at a time; the worker's own CUDA events behind
a spin kernel (the device clock) repeated within 2%, but the spin ran in the candidate's process, which can
shorten it and under-report by as much (tests/redteam/cuda/shorten_spin.py). Here nothing the timing rests on
runs in the candidate's process:

- A **holder** (a worker process of ours, role "holder", the parent's uid, a spare core) runs, per held phase, on
  its own stream: event a, a *chain* of short spin kernels that holds the GPU while the worker queues the phase's
  work, event b, GO := n on the side's semaphore page, wait until DONE >= n, event c. The worker's stream waits for
  GO before its work and writes DONE after it (worker.py). Holder's b -> c is the phase's GPU time, read from the
  holder's own events: the host's queueing is hidden behind the hold and no clock of the candidate's is read.
- A worker that **skips the wait** (or writes GO itself) runs during the hold: contexts time-slice the GPU, so
  the holder's chain of short spins takes longer by what ran in its gaps (a single long spin would not: its cycle
  count runs on while it is switched out). The hold beyond the reference's same-length hold is charged
  (``stretch``). A call 7 probe on the H100: a worker that skipped the wait paid 17-25% *more* than honest.
- A worker that **writes DONE early** leaves work after event c: the parent's clock around the phase (holder
  request to worker reply) then holds more than hold + work + the reference's round trip; the excess beyond the
  reference's own jitter is charged (``outside``).
- **Host work while the hold keeps the GPU** (computing on the CPU during the hold, then copying in) is on no GPU
  clock, so the worker's CPU time in the phase (read by the parent from the kernel; the worker sleeps in a blocking
  event while its GPU work runs) is compared with the reference's: the excess beyond 10% and 3 robust standard
  deviations is charged (``cpu``). In a timed span the candidate may also use as much CPU time as its own GPU
  time (dispatch hidden behind its own kernels costs nothing real).

Staging and digests are held the same way, so the harness check compares GPU time with GPU time (the host
clock's harness noise, 0.06-0.6 ms per span on the H100 VM, was the other source of spread).
"""

from __future__ import annotations

import math
import mmap
import os
import secrets
import statistics
import struct
from dataclasses import dataclass, field

SEM_GO, SEM_DONE = 0, 64  # byte offsets in the page (kernelrl.evaluation.worker has the same)
SPIN_PIECE_S = 25e-6  # one spin of the holder's chain: short enough that a context switch shows as a gap
CHAIN_MIN, CHAIN_MAX = 8, 400  # spins per hold: the holder queues ~4 us a spin, so 400 is ~2 ms of its host time


def _robust_sd(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    med = statistics.median(xs)
    return 1.4826 * statistics.median(abs(x - med) for x in xs)


class Semaphores:
    """The two sides' semaphore pages: 4 KB files in /dev/shm (a CUDA-registrable shared mapping), the
    reference's readable by our uid only, the candidate's owned by its uid (when it has one). The parent maps both
    too, to write DONE itself after every phase, so the holder's stream never waits forever on a worker that
    crashed or never wrote it."""

    def __init__(self, cand_uid: int | None, root: str = "/dev/shm"):
        tag = f"kernelrl-held-{os.getpid()}-{secrets.token_hex(6)}"
        self.paths = {side: os.path.join(root, f"{tag}-{side}") for side in ("ref", "cand")}
        self._maps = {}
        for side, path in self.paths.items():
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, b"\0" * 4096)
                if side == "cand" and cand_uid is not None:
                    os.fchown(fd, cand_uid, cand_uid)
                self._maps[side] = mmap.mmap(fd, 4096)
            finally:
                os.close(fd)

    def done(self, side: str, seq: int) -> None:
        """DONE := seq on ``side``'s page, from the host (no effect on a holder that saw the worker's own write)."""
        struct.pack_into("<I", self._maps[side], SEM_DONE, seq & 0xFFFFFFFF)

    def close(self) -> None:
        for m in self._maps.values():
            try:
                m.close()
            except (BufferError, ValueError):
                pass
        for path in self.paths.values():
            try:
                os.unlink(path)
            except OSError:
                pass


def hold_plan(queued_s: float, holder_queue_s: float, factor: float, spin_rate: float) -> tuple[int, int, float]:
    """(cycles, chain, seconds) of a hold that outlasts the worker's queueing of the phase ``factor`` times over,
    plus the holder's own queueing of the chain (+0.2 ms). With 1.5x a device-clock spin left the GPU waiting for
    the host in some spans (bench/timer_modes.py); longer holds cost wall time, not accuracy."""
    secs = factor * max(queued_s, 0.0) + holder_queue_s + 2e-4
    chain = int(min(CHAIN_MAX, max(CHAIN_MIN, round(secs / SPIN_PIECE_S))))
    cycles = max(1000 * chain, int(secs / max(spin_rate, 1e-15)))
    return cycles, chain, cycles * spin_rate


@dataclass
class Phase:
    """One side's held phase as the parent saw it: ``wall`` its parent-clock seconds (holder request to worker
    reply), ``hold`` and ``work`` the holder's events (a -> b, b -> c), ``cpu`` the worker's CPU seconds in it
    (kernel clock), ``nominal`` the hold's planned seconds."""
    wall: float
    hold: float
    work: float
    cpu: float
    nominal: float


@dataclass
class HeldBook:
    """Per kind of phase ("go", "stage", "digest"): the reference's recent values that set the tolerances, and
    what was charged to the candidate (for timing's keys)."""
    hold_rel: dict = field(default_factory=dict)  # kind -> the reference's hold / nominal
    out_ref: dict = field(default_factory=dict)  # kind -> the reference's wall - hold - work
    cpu_ref: dict = field(default_factory=dict)  # kind -> the reference's CPU seconds
    charged: dict = field(default_factory=lambda: {"stretch": [], "outside": [], "cpu": []})  # per go pair
    charged_harness: dict = field(default_factory=lambda: {"stretch": 0.0, "outside": 0.0, "cpu": 0.0})
    work: dict = field(default_factory=lambda: {"ref": [], "cand": []})  # go pairs' GPU seconds (diagnostic)
    holds: list = field(default_factory=list)  # the reference's go holds, seconds
    outside: dict = field(default_factory=lambda: {"ref": [], "cand": []})
    cpu: dict = field(default_factory=lambda: {"ref": [], "cand": []})


def pair_times(kind: str, ref: Phase, cand: Phase, book: HeldBook, cap: float) -> tuple[float, float, dict]:
    """Both sides' seconds for one pair of held phases of the same kind and hold length: the reference's GPU time
    (trusted: our code, the candidate frozen while it runs), and the candidate's GPU time plus three charges, each
    beyond the reference's own recent jitter (see the module docstring): ``stretch`` (its hold beyond the
    reference's), ``outside`` (its parent-clock phase beyond hold + work + the reference's least round trip, at
    most ``cap`` of its GPU time forgiven) and ``cpu`` (its CPU time beyond the reference's, or in a span beyond
    its own GPU time, + 10% + 3 robust sd). Returns (t_ref, t_cand, charges)."""
    hr = book.hold_rel.setdefault(kind, [])
    orf = book.out_ref.setdefault(kind, [])
    cr = book.cpu_ref.setdefault(kind, [])
    nominal = max(ref.nominal, 1e-9)
    hr.append(ref.hold / nominal)
    out_r = max(0.0, ref.wall - ref.hold - ref.work)
    orf.append(out_r)
    cr.append(ref.cpu)
    rel = hr[-32:]
    hold_tol = (3 * _robust_sd(rel) + 2e-3) * nominal + 5e-6
    usual = max(ref.hold, statistics.median(rel) * nominal)
    stretch = max(0.0, cand.hold - usual - hold_tol) if math.isfinite(cand.hold) else cand.wall
    recent = orf[-32:]
    work_c = max(0.0, cand.work) if math.isfinite(cand.work) else 0.0
    out_c = max(0.0, cand.wall - cand.hold - work_c)
    out_tol = min(max(3 * _robust_sd(recent), 2e-5), cap * max(work_c, ref.work))
    outside = max(0.0, out_c - min(recent) - out_tol)
    allowed = max(ref.cpu, work_c) if kind == "go" else ref.cpu
    cpu_tol = 0.1 * allowed + 3 * _robust_sd(cr[-32:]) + 2e-5
    cpu = max(0.0, cand.cpu - allowed - cpu_tol)
    charges = {"stretch": stretch, "outside": outside, "cpu": cpu}
    if kind == "go":
        for key, v in charges.items():
            book.charged[key].append(v)
        book.work["ref"].append(ref.work)
        book.work["cand"].append(work_c)
        book.holds.append(ref.hold)
        book.outside["ref"].append(out_r)
        book.outside["cand"].append(out_c)
        book.cpu["ref"].append(ref.cpu)
        book.cpu["cand"].append(cand.cpu)
    else:
        for key, v in charges.items():
            book.charged_harness[key] += v
    return max(ref.work, 0.0), work_c + stretch + outside + cpu, charges


def held_info(book: HeldBook, k: int) -> dict:
    """timing's keys for the held clock (per call where they are charges, ms)."""
    def med_ms(xs):
        return round(statistics.median(xs) * 1e3, 5) if xs else None

    def mean_call_ms(xs):
        return round(statistics.fmean(xs) / k * 1e3, 6) if xs else 0.0

    info = {"clock": "held", "hold_ms": med_ms(book.holds),
            "held_work_ms_ref": med_ms(book.work["ref"]), "held_work_ms_cand": med_ms(book.work["cand"]),
            "outside_ms_ref": med_ms(book.outside["ref"]), "outside_ms_cand": med_ms(book.outside["cand"]),
            "host_cpu_ms_ref": med_ms(book.cpu["ref"]), "host_cpu_ms_cand": med_ms(book.cpu["cand"]),
            "stretch_charge_ms": mean_call_ms(book.charged["stretch"]),
            "outside_charge_ms": mean_call_ms(book.charged["outside"]),
            "host_charge_ms": mean_call_ms(book.charged["cpu"]),
            "harness_charges_ms": {key: round(v * 1e3, 4) for key, v in book.charged_harness.items()}}
    if book.cpu["ref"] and book.cpu["cand"]:
        info["host_cpu_ratio"] = round(statistics.median(book.cpu["ref"]) /
                                       max(statistics.median(book.cpu["cand"]), 1e-12), 4)
    return info
