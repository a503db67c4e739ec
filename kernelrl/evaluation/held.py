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
  event while its GPU work runs) is compared with the reference's (``cpu``). In a timed span the candidate may
  also use as much CPU time as its own GPU time (dispatch hidden behind its own kernels costs nothing real).
- GPU work **left queued** past a phase delays the holder's own wait for an idle GPU before the reference's next
  phase (``drain``).

Every check is an aggregate test over the counted pairs (``charges``), not a per-pair charge.

Staging and digests are held the same way, so the harness check compares GPU time with GPU time (the host
clock's harness noise, 0.06-0.6 ms per span on the H100 VM, was the other source of spread).
"""

from __future__ import annotations

import math
import mmap
import os
import re
import secrets
import statistics
import struct
from dataclasses import dataclass, field

from kernelrl.evaluation.stats import robust_sd

SEM_GO, SEM_DONE = 0, 64  # byte offsets in the page (kernelrl.evaluation.worker has the same)
SPIN_PIECE_S = 25e-6  # one spin of the holder's chain: short enough that a context switch shows as a gap
CHAIN_MIN, CHAIN_MAX = 8, 400  # spins per hold: the holder queues ~4 us a spin, so 400 is ~2 ms of its host time


_PAGE_RE = re.compile(r"kernelrl-held-(\d+)-[0-9a-f]+-(ref|cand)$")
_pages_reaped: set[str] = set()  # the roots already reaped by this process


def reap_stale_pages(root: str = "/dev/shm", force: bool = False) -> list[str]:
    """Once per process (or with ``force``): remove the semaphore pages of evaluators that are gone (a parent
    killed with SIGKILL cannot unlink its pages; 4 KB each of /dev/shm, for good). A page counts as stale only when
    the pid in its name is not alive."""
    if root in _pages_reaped and not force:
        return []
    _pages_reaped.add(root)
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        m = _PAGE_RE.match(name)
        if not m:
            continue
        pid = int(m.group(1))
        try:
            os.kill(pid, 0)
            continue  # alive (ours, another evaluator's, or a reused pid): kept
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # alive under another uid
        try:
            os.unlink(os.path.join(root, name))
            removed.append(name)
        except OSError:
            pass
    return removed


class Semaphores:
    """The two sides' semaphore pages: 4 KB files in /dev/shm (a CUDA-registrable shared mapping), the
    reference's readable by our uid only, the candidate's owned by its uid (when it has one). The parent maps both
    too, to write DONE itself after every phase, so the holder's stream never waits forever on a worker that
    crashed or never wrote it."""

    def __init__(self, cand_uid: int | None, root: str = "/dev/shm"):
        reap_stale_pages(root)
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
    plus the holder's own queueing of the chain, + 0.5 ms for the request to reach the worker and the worker's first
    launch (its wake-up and transit: 0.05-0.5 ms on the VM). With 1.5x a device-clock spin left the GPU waiting for
    the host in some spans (bench/timer_modes.py, in git history); longer holds cost wall time, not accuracy."""
    secs = factor * max(queued_s, 0.0) + holder_queue_s + 5e-4
    chain = int(min(CHAIN_MAX, max(CHAIN_MIN, round(secs / SPIN_PIECE_S))))
    cycles = max(1000 * chain, int(secs / max(spin_rate, 1e-15)))
    return cycles, chain, cycles * spin_rate


@dataclass
class Phase:
    """One side's held phase as the parent saw it: ``wall`` its parent-clock seconds (holder request to worker
    reply), ``hold`` and ``work`` the holder's events (a -> b, b -> c), ``cpu`` the worker's CPU seconds in it
    (kernel clock), ``nominal`` the hold's planned seconds, ``drain`` the parent-clock seconds of the quiesce just
    before it (the reference's waits for the candidate's leftover GPU work and for the context switch; the
    candidate's, for the switch alone), ``after`` the held phase before that quiesce ("ref:digest", "cand:go", ...;
    "" for the other side's phase of the same kind)."""
    wall: float
    hold: float
    work: float
    cpu: float
    nominal: float
    drain: float = 0.0
    after: str = ""


@dataclass
class HeldBook:
    """Every pair of held phases of the counted blocks, per kind ("go", "stage", "digest", "empty"): the reference's
    values (the noise the checks allow for) and the candidate's signed differences from them. ``pending`` holds
    the current block's pairs until it is counted (``commit``) or dropped as warm-up (``discard``)."""
    pairs: dict = field(default_factory=lambda: {"go": [], "stage": [], "digest": [], "empty": []})
    pending: list = field(default_factory=list)

    def commit(self) -> None:
        for kind, row in self.pending:
            self.pairs[kind].append(row)
        self.pending = []

    def discard(self) -> None:
        self.pending = []


# Per-process biases of the harness phases' host-side checks, as fractions of the reference's own value: on the
# H100 VM the same harness code took 25-50% more CPU time in one worker than in the other for a whole evaluation
# (either side; 2026-11-26 v8 call 1: DiagMatmul 4.9 against 7.5 ms a span, Swish 4.1 against 5.1, another Swish
# evaluation the reverse, 9 against 4.3), so the standard error of n pairs shrinks while the bias stays, and
# honest candidates lost up to half their score. A cheat that computes on the host during staging to skip GPU
# work does far more than this (the red team's precompute: 2.1x the reference's CPU and 5x its outside time),
# and its GPU work in the phase is charged in full anyway (pair_times). The spans' checks keep no such floor.
HARNESS_CPU_BIAS = 0.6
HARNESS_OUTSIDE_BIAS = 1.0
# The same for the holder's wait before the reference's harness phase (``drain``), as a share of the candidate's
# own GPU time in the block's spans: after an honest candidate's staging that wait ran 20-130 us longer than its
# clean baseline (H100, v8 calls 1-2; 30-80 us a block with CUDA-graph spans, 2026-11-26 seventh session, call 1),
# 1-3.5% of a fast candidate's spans, charged to it as harness excess. Work left queued past the candidate's
# phases gains at most this share; the red team's leftovers are whole blocks' softmaxes, many times more.
HARNESS_DRAIN_SHARE = 0.05
# The spans' drain and outside checks, and the harness phases' GPU-time excess (stats.paired_totals), forgive this
# share of the candidate's median span for the same reason: with CUDA-graph spans on the H100 (seventh session,
# call 2, 9 tasks x 6 evaluations) the candidates' uncharged GPU time per call repeated within 0.2-2% between
# evaluations, and these checks added 0-6% to it on honest candidates (the holder's wait before the reference's
# span 0-32 us longer than before the candidate's, a switch out of the candidate's context; its harness phases'
# GPU time a few % above the reference's for a whole evaluation). A cheat gains at most this share per check.
SPAN_BIAS_SHARE = 0.05


def _tmean(xs: list[float]) -> float:
    """Mean with the g = max(1, n // 10) largest and smallest values left out (n >= 5): one hiccup of the VM's
    host in a pair does not make a charge (call 2: one pair of 9 charged an honest digest 0.4 ms); a cheat
    confined to a tenth of the pairs keeps at most that tenth."""
    xs = sorted(xs)
    g = max(1, len(xs) // 10) if len(xs) >= 5 else 0
    xs = xs[g:len(xs) - g] or xs
    return statistics.fmean(xs)


def pair_times(kind: str, ref: Phase, cand: Phase, book: HeldBook) -> tuple[float, float]:
    """Both sides' GPU seconds for one pair of held phases of the same kind and hold length (the holder's b -> c;
    a value that is no number counts as the candidate's whole parent-clock phase), and the pair booked for the
    checks (``charges``)."""
    work_c = cand.work if math.isfinite(cand.work) and cand.work >= 0 else cand.wall
    row = {"nominal": ref.nominal, "hold_r": ref.hold, "hold_c": cand.hold,
           "out_r": max(0.0, ref.wall - ref.hold - ref.work), "out_c": max(0.0, cand.wall - cand.hold - work_c),
           "cpu_r": ref.cpu, "cpu_c": cand.cpu, "work_r": ref.work, "work_c": work_c,
           "drain_r": ref.drain, "drain_c": cand.drain,
           "after_r": ref.after or f"cand:{kind}", "after_c": cand.after or f"ref:{kind}"}
    book.pending.append((kind, row))
    return max(ref.work, 0.0), work_c


def _drain_diffs(book: HeldBook, kind: str, rows: list[dict]) -> tuple[list[float], float]:
    """The drain check's per-pair differences for ``kind`` (seconds) and the robust sd of its baseline's noise.

    Every booked drain that came right after a phase of the *candidate* (either side's phase next: its leftover
    work delays both) is compared with the same transition after the *reference's* phase: the median wait before
    a phase of the same kind right after a reference's phase of the same kind ("stage after digest"), the
    candidate frozen throughout, so a switch and the machine's state alone; with fewer than 2 of those, the median
    of all waits after a reference's phase of that kind. A pair's difference is the sum over its two drains (0
    where neither followed the candidate). Why by transition: on the H100 (2026-11-26, eighth session, call 1)
    the wait depended on what came before it, on both sides alike: ~250-350 us at a block's start (after the
    digests and the parent's checks between blocks), 45-210 us within a block. Version 9 compared the
    reference's waits with the median before the candidate's spans, so a block that began with the reference's
    staging charged an honest candidate ~150 us."""
    base: dict[tuple[str, str], list[float]] = {}
    for k, krows in book.pairs.items():
        for r in krows:
            for who in ("r", "c"):
                after = r.get(f"after_{who}", "")
                if after.startswith("ref:"):
                    base.setdefault((k, after[4:]), []).append(r[f"drain_{who}"])
    by_after: dict[str, list[float]] = {}
    for (_k, y), v in base.items():
        by_after.setdefault(y, []).extend(v)
    med = {key: statistics.median(v) for key, v in base.items() if len(v) >= 2}
    med_after = {y: statistics.median(v) for y, v in by_after.items()}
    every = [x for v in base.values() for x in v]
    fallback = statistics.median(every) if every else 0.0

    def baseline(after: str) -> float:
        y = after.partition(":")[2]
        return med.get((kind, y), med_after.get(y, fallback))

    diffs = []
    for r in rows:
        d = 0.0
        for who in ("r", "c"):
            after = r.get(f"after_{who}", "")
            if after.startswith("cand:"):
                d += r[f"drain_{who}"] - baseline(after)
        diffs.append(d)
    noise = [x - med.get(key, med_after[key[1]]) for key, v in base.items() for x in v]
    return diffs, robust_sd(noise) if len(noise) >= 2 else 0.0


def charges(book: HeldBook, kind: str) -> dict[str, float]:
    """What the counted pairs of ``kind`` charge the candidate, seconds per pair, by check (module docstring):
    the trimmed mean of its signed differences from the reference beyond 2 standard errors, the standard error
    from the *reference's* own spread (the candidate cannot widen it), so honest noise, which is as often
    negative as positive, is not charged, while a cheat that repeats is charged but for 2 standard errors.

    - ``stretch``: its hold - the reference's (the same planned length): GPU work run during the hold.
    - ``outside``: (parent-clock phase - hold - work) - the reference's: work after the holder's end event.
    - ``cpu``: its CPU seconds - the reference's (in a span: - the larger of the reference's and its own GPU time:
      dispatch hidden behind its own kernels is free): host work while the hold kept the GPU.
    - ``drain``: the holder's wait for an idle GPU (the candidate frozen) before a phase that follows one of the
      candidate's, beyond the same transition's wait after the reference's phase (``_drain_diffs``): GPU work
      the candidate left queued or started outside its phases. Both are the holder's own numbers; the
      candidate's quiesce is not (it could lengthen its own). Charging the reference's waits per phase (as on
      the host clock) charged honest candidates the context switch, ~0.6 ms a phase on the H100 (call 5).
    Per-pair one-sided charges (v7's first cut) charged honest noise: on the H100 VM the host's speed moved the
    harness phases' CPU time by up to 1.7x between pairs, and Softmax lost 30% of its score to it."""
    rows = book.pairs.get(kind) or []
    if not rows:
        return {"stretch": 0.0, "outside": 0.0, "cpu": 0.0, "drain": 0.0}
    n = len(rows)
    drain_diffs, drain_sd = _drain_diffs(book, kind, rows)
    nominal = statistics.median(r["nominal"] for r in rows)
    cpu_ref = statistics.median(r["cpu_r"] for r in rows)
    diffs = {
        "stretch": [r["hold_c"] - r["hold_r"] for r in rows],
        "outside": [r["out_c"] - r["out_r"] for r in rows],
        "cpu": [r["cpu_c"] - (max(r["cpu_r"], r["work_c"]) if kind == "go" else r["cpu_r"]) for r in rows],
        "drain": drain_diffs,  # against the same transition after the reference's phase (_drain_diffs)
    }
    sigma = {  # a difference of two draws: sqrt(2) x the reference's robust sd, with floors
        "stretch": max(math.sqrt(2) * robust_sd([r["hold_r"] - r["nominal"] for r in rows]), 1e-3 * nominal, 2e-6),
        "outside": max(math.sqrt(2) * robust_sd([r["out_r"] for r in rows]), 5e-6),
        # at least 15% of the reference's: the VM's host moved a phase's CPU time by up to 1.7x between
        # neighbouring pairs, and one evaluation in three charged an honest digest ~1 ms with a 1% floor (call 3)
        "cpu": max(math.sqrt(2) * robust_sd([r["cpu_r"] for r in rows]), 0.15 * cpu_ref, 5e-6),
        "drain": max(math.sqrt(2) * drain_sd, 5e-6),
    }
    bias = {"stretch": 0.0, "outside": 0.0, "cpu": 0.0, "drain": 0.0}
    if kind != "go":  # per-process biases (HARNESS_CPU_BIAS): an allowance that does not shrink with n
        bias["cpu"] = HARNESS_CPU_BIAS * cpu_ref
        bias["outside"] = HARNESS_OUTSIDE_BIAS * statistics.median(r["out_r"] for r in rows)
        spans = book.pairs.get("go") or []
        if spans:  # the candidate's GPU time in the spans of one block (go pairs per pair of this kind)
            bias["drain"] = HARNESS_DRAIN_SHARE * statistics.median(r["work_c"] for r in spans) * len(spans) / n
    else:  # SPAN_BIAS_SHARE of its own median span
        bias["drain"] = bias["outside"] = SPAN_BIAS_SHARE * statistics.median(r["work_c"] for r in rows)
    out = {key: max(0.0, _tmean(d) - max(2 * sigma[key] / math.sqrt(n), bias[key])) for key, d in diffs.items()}
    if kind == "empty":  # the empty spans (held_span_overhead): only the drain before them is the candidate's
        out.update(stretch=0.0, outside=0.0, cpu=0.0)
    return out


def settle_more(book: HeldBook, rounds: int, min_rounds: int) -> bool:
    """SETTLE_CHARGES: whether the rounds go on although the interval is tight: a check charges the
    counted pairs (any kind) and fewer than 2 x min_rounds pairs are counted. A disturbance confined to a few
    blocks falls into the checks' trimmed tenth as the count grows (``_tmean``); a cheat that repeats does not."""
    return rounds < 2 * min_rounds and any(v > 0 for kind in book.pairs for v in charges(book, kind).values())


# An empty span's hold (hold_plan adds 0.5 ms): it should outlast the worker's request and its GO wait. On a quiet
# H100 host 1 ms does; with nvcc building beside the evaluation or 16 busy loops on the 16 cores, 2-5 of 8 blocks'
# empty spans read 2-10 ms (a late worker's wait on the clock; 2026-12-06 H100, calls 4 and 7 of
# bench/results/2026-12-06-h100-evaluator-v21 and -v22), which empty_floor (version 22) leaves out. 5 ms made such
# spans rarer on a loaded host (16 of 128 against 45 of 96) and moved no honest case, but the red team's early_done
# (DONE written before its calls) then read ~5 ms span holds and 1.3-1.4 where it read 1.1 ms and 2.99 at 1 ms on the
# same machine (calls 5-7 there; not understood): kept at 1 ms, where the whole red team last passed (version 21).
EMPTY_HOLD_S = 1e-3


# The most held_span_overhead takes off a side's median span: a guard against a broken measurement. It was 0.5 in
# version 9, and bound on the GRU's 38x candidate (eighth session, call 1: spans of 0.41 ms at k = 1 carrying the
# 0.284 ms every empty span took, so 0.205 ms was taken off and it scored 22.8x; 33.8x at k = 2, still bound),
# so the score moved with k. The empty spans of both sides repeated within 0.5% there.
SPAN_OVERHEAD_CAP = 0.8


def empty_floor(empties: list[float]) -> float:
    """One side's fixed span cost from its blocks' empty spans: their lower quartile (version 22; the median
    before). The cost is a floor that host delays only add to (a worker woken late puts its wait on the clock:
    2-10 ms empty spans in up to half the blocks on a loaded host, call 4 of
    bench/results/2026-12-06-h100-evaluator-v21), and clean empty spans repeat within ~1% (0.281-0.285 ms on the
    H100), so the quartile is the clean value where the median took the delays in; lower, it keeps ratios toward 1."""
    return statistics.quantiles(empties, n=4, method="inclusive")[0] if len(empties) > 1 else empties[0]


def _span_overhead_and_cap(empty_ref: list[float], empty_cand: list[float], go_ref: list[float],
                           go_cand: list[float]) -> tuple[float, float] | None:
    """The smaller side's empty_floor and SPAN_OVERHEAD_CAP of the shorter side's median span; None with fewer
    than 3 empty spans on either side or no spans."""
    if min(len(empty_ref), len(empty_cand)) < 3 or not go_ref or not go_cand:
        return None
    o = min(empty_floor(empty_ref), empty_floor(empty_cand))
    return o, SPAN_OVERHEAD_CAP * min(statistics.median(go_ref), statistics.median(go_cand))


def held_span_overhead(empty_ref: list[float], empty_cand: list[float], go_ref: list[float],
                       go_cand: list[float]) -> float:
    """What the held clock takes off every span of both sides (HELD_SPAN_OVERHEAD): the smaller of the
    two sides' empty_floor (the lower quartile of its empty spans: GO, the worker's wait, DONE, the two context
    switches; no call), so the candidate can only lower it; 0 with fewer than 3 of either; at most
    SPAN_OVERHEAD_CAP of the shorter side's median span (~0.28 ms against 0.4-10 ms spans on the H100)."""
    oc = _span_overhead_and_cap(empty_ref, empty_cand, go_ref, go_cand)
    return 0.0 if oc is None else max(0.0, min(oc))


def span_overhead_capped(empty_ref: list[float], empty_cand: list[float], go_ref: list[float],
                         go_cand: list[float]) -> bool:
    """Report only: whether SPAN_OVERHEAD_CAP bound held_span_overhead, so the score rests on the cap, not on the
    empty spans. Seen on the H100 (2026-12-06, bench/results/2026-12-06-h100-evaluator-v21): a launch-bound eager
    reference against the same calls replayed scored 4.34 where its siblings scored 1.97-2.09, its candidate's time
    exactly 0.2 of its raw replay time."""
    oc = _span_overhead_and_cap(empty_ref, empty_cand, go_ref, go_cand)
    return oc is not None and oc[0] > oc[1]


def held_info(book: HeldBook, k: int) -> dict:
    """timing's keys for the held clock: medians per span (ms) and the charges per call (ms)."""
    go = book.pairs["go"]

    def med_ms(key):
        return round(statistics.median(r[key] for r in go) * 1e3, 5) if go else None

    ch = charges(book, "go")
    info = {"clock": "held", "hold_ms": med_ms("hold_r"), "held_work_ms_ref": med_ms("work_r"),
            "held_work_ms_cand": med_ms("work_c"), "outside_ms_ref": med_ms("out_r"),
            "outside_ms_cand": med_ms("out_c"), "host_cpu_ms_ref": med_ms("cpu_r"), "host_cpu_ms_cand": med_ms("cpu_c"),
            "stretch_charge_ms": round(ch["stretch"] / k * 1e3, 6),
            "outside_charge_ms": round(ch["outside"] / k * 1e3, 6), "host_charge_ms": round(ch["cpu"] / k * 1e3, 6),
            "harness_charges_ms": {kind: {key: round(v * 1e3, 4) for key, v in charges(book, kind).items()}
                                   for kind in ("stage", "digest", "empty")},
            "harness_held_ms": {kind: {key: round(statistics.median(r[key] for r in book.pairs[kind]) * 1e3, 4)
                                       for key in ("work_r", "work_c", "cpu_r", "cpu_c", "hold_r")}
                                for kind in ("stage", "digest") if book.pairs[kind]}}
    if go:
        info["host_cpu_ratio"] = round(statistics.median(r["cpu_r"] for r in go) /
                                       max(statistics.median(r["cpu_c"] for r in go), 1e-12), 4)
    return info
