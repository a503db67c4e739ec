"""Phase 3, the timed blocks: paired spans of k calls, strictly alternating between the sides, staged and
digested per block, until the score's interval is tight (target_ci) or budget_s is spent; the statistics
(stats.py) and what timing.* reports."""

from __future__ import annotations

import math
import statistics
import time
from typing import TYPE_CHECKING

from kernelrl.evaluation.calibrate import calls_per_span, uses_device_clock, device_spin, uses_held_clock, run_timeout
from kernelrl.evaluation.compare import compare_digests
from kernelrl.evaluation.held import (EMPTY_HOLD_S, SPAN_BIAS_SHARE, charges, empty_floor, held_info,
                                      held_span_overhead, pair_times, settle_more, span_overhead_capped)
from kernelrl.evaluation.result import CandidateFailed, EvalResult
from kernelrl.evaluation.session_held import reply_seconds
from kernelrl.evaluation.stats import PairedStats, bucket_stats, paired_stats, paired_totals, robust_sd

if TYPE_CHECKING:
    from kernelrl.evaluation.calibrate import Calibration
    from kernelrl.evaluation.session import Session


# Diagnostic only: the paper's statistic (median of this many bucket means of the per-round ratios) is reported beside
# the score in timing.bucket_means.
BUCKETS = 7


# Time at least this long (and min_rounds) before the interval may stop the rounds: a few early rounds that happen to
# agree must not end the measurement.
MIN_TIMING_S = 0.3


# Stop after this many paired spans even if budget remains.
MAX_ROUNDS = 100000


# Timing starts with warm-up blocks that are not counted: the first always, and the next ones while either side's
# spans in it and the previous block spread more than warmup_tolerance, up to this many blocks (the budget counts from
# the first counted block). A candidate's first blocks after its correctness checks ran 10-50x slower on a CPU VM
# (first touch of the memory its outputs get: ~10 us per page fault), and one such counted block dragged an identical
# candidate's lower bound to 0.22. The candidate gains nothing here: uncounted blocks only delay.
WARMUP_BLOCKS_MAX = 4


# A side counts as warm when its spans in two consecutive blocks all lie within this fraction of their middle (see
# warmup_blocks_max).
WARMUP_TOLERANCE = 0.1


# Diagnostic: before each timing block the reference times a fixed Python loop and, on CUDA, a tiny kernel launch on
# the timing core (outside every clock, ~1 ms); timing.host_probe reports their median and spread, and rounds_raw each
# block's values. Tells host-speed states (which move a launch-bound ratio) apart from GPU noise.
HOST_PROBE = True


# The largest share of the candidate's own span (per block) by which its harness time (staging, digest) may exceed the
# reference's without being charged; the reference's harness noise sets the allowance below that. It is what a cheat
# that moves work into the harness keeps: at most 1 + this (1.2x). 1/3 (1.33x) before: a harness patched to precompute
# a third of its calls while staging measured estimates 1.3-1.7x honest on a CPU VM; re-scoring 156 honest evaluations
# (CPU VM and H100) with 0.2 moved none of their medians and no lower bound by more than 5.3%.
HARNESS_ALLOWANCE = 0.2


# clock='held' (version 8): each counted block also times one *empty* held span per side (no calls: the holder's GO,
# the worker's wait and DONE, the two context switches), and the smaller side's median is taken off every span of both
# sides. On the H100 VM a held span carried ~300 us of such fixed cost (regressed over k on 15 tasks, 2026-11-26 v8:
# 230-340 us on the candidate's side), 15-30% of a fast candidate's 1-2 ms span: scores were understated and moved
# with k (RMSNorm 3.19 at k=101, 2.49 at k=25). The candidate cannot raise what is taken off (the smaller of the two
# medians; its own only lowers it).
HELD_SPAN_OVERHEAD = True


# Calls per block whose outputs are digested (a random sample drawn after the clock; every call's structure, dtype and
# shape is checked). A candidate wrong in a share p of calls escapes one block with probability (1-p)^32.
DIGEST_SAMPLE = 32


# clock='held': when the interval would stop the rounds while a check charges the candidate (held.charges), time on to
# twice min_rounds (within budget_s) first. A charge from a passing disturbance of the GPU in a few blocks (H100,
# eighth session: one LayerNorm evaluation in 120 charged 6% for holds ~69 us longer in two slow blocks) is then
# trimmed by the checks' trimmed mean; a cheat that repeats is charged as before. Costs wall time only on evaluations
# that are charged.
SETTLE_CHARGES = True


# Share of timing blocks whose outputs of one random call are fetched whole after the clock and compared elementwise
# with the reference's (at least one block per evaluation; every block is also digest-checked). About 3 audits in a 2
# s evaluation of 2-span blocks.
AUDIT_FRACTION = 0.08


def device_times(wall: dict, replies: dict, spin: float, dev_info: dict, q_block: dict, cap: float) -> dict:
    """One pair of device-clock spans (EvalConfig.clock): each side's device seconds, the candidate's with what the
    trusted clocks say it did off the GPU clock. The reference's reply is trusted (our code; the candidate is
    frozen while it runs); the candidate's is not. Three checks, each against the reference's own recent spans:

    - **The spin ran** (version 6): a span cannot end before its spin, its device time and a round trip. A
      candidate whose parent-clock span is shorter than the reference's spin + the device time it claims + the
      reference's least round trip (beyond the spin's and the round trip's measured jitter) skipped or shortened
      the spin and under-reports its device time: its whole span counts, less that round trip. This catches
      claims the span cannot hold, not all lies: a spin shortened by x with the device time under-reported by the
      same x gives an honest-looking span (``tests/redteam/cuda/shorten_spin.py``): why this clock is no reward.
    - **Work outside the events** (side streams, a patched timer): what its parent-clock span holds beyond the
      spin and its device time (``outside``) is compared with the reference's; the excess beyond 3 robust
      standard deviations of the reference's (at least 20 us, at most ``cap`` of the device time it reports) is
      charged. A value that is no number, negative or longer than its span is replaced by the span.
    - **Host work while the spin held the GPU** (version 6): the worker's CPU time in the span, which the parent
      reads from the kernel (``parent_cpu_s``). The candidate may use as much as the reference used in the same
      pair or as its own device time (dispatch that a GPU-bound candidate hides behind its own kernels), plus 10%
      and 3 robust standard deviations of the reference's; the rest is charged. Computing on the CPU while the
      spin holds the GPU, then copying the result in, is charged at its CPU time; a candidate that dispatches
      more than the reference and more than its GPU time is charged that host time (what it costs for real)."""
    rr, rc = replies.get("ref") or {}, replies.get("cand") or {}
    spin_ref = min(reply_seconds(rr, "spin_done_s", 0.0), wall["ref"])
    dev_ref = min(reply_seconds(rr, "dev_s", wall["ref"]), wall["ref"])
    out_ref = max(0.0, wall["ref"] - spin_ref - dev_ref)
    dev_info["outside_ref"].append(out_ref)
    dev_info["spin"].append(spin_ref)
    recent = dev_info["outside_ref"][-32:]
    out_min, out_sd = min(recent), robust_sd(recent)
    spin_sd = robust_sd(dev_info["spin"][-32:])
    dev_cand = min(reply_seconds(rc, "dev_s", wall["cand"]), wall["cand"])
    spin_cand = min(reply_seconds(rc, "spin_done_s", 0.0), spin_ref)
    # jitter of the spin (the SM clock) and of the round trip, and half the least round trip: the candidate's
    # reply path is the same code, but its process wakes on its own core
    slack = 3 * math.hypot(out_sd, spin_sd) + 2e-3 * spin_ref + 0.5 * out_min + 2e-5
    if wall["cand"] < spin_ref + dev_cand + out_min - slack:
        dev_info["spin_short"] += 1
        dev_info["outside_cand"].append(0.0)
        dev_info["charged"].append(0.0)
        dev_info["cpu_charged"].append(0.0)
        t_cand = max(dev_cand, wall["cand"] - out_min)
    else:
        out_cand = max(0.0, wall["cand"] - spin_cand - dev_cand)
        dev_info["outside_cand"].append(out_cand)
        tol = min(max(3 * out_sd, 2e-5), cap * dev_cand)
        charge = max(0.0, out_cand - out_min - tol)
        dev_info["charged"].append(charge)
        cpu_ref, cpu_cand = rr.get("parent_cpu_s"), rc.get("parent_cpu_s")
        cpu_charge = 0.0
        if isinstance(cpu_ref, float) and isinstance(cpu_cand, float):
            dev_info["cpu_ref"].append(cpu_ref)
            dev_info["cpu_cand"].append(cpu_cand)
            allowed = max(cpu_ref, dev_cand)
            cpu_tol = 0.1 * allowed + 3 * robust_sd(dev_info["cpu_ref"][-32:]) + 2e-5
            cpu_charge = max(0.0, cpu_cand - allowed - cpu_tol)
        dev_info["cpu_charged"].append(cpu_charge)
        t_cand = dev_cand + charge + cpu_charge
    for role, q in (("ref", reply_seconds(rr, "queued_s", 0.0)), ("cand", reply_seconds(rc, "queued_s", 0.0))):
        q_block[role].append(q)
        if spin and q > spin:  # the host was still queueing when the spin ended: the GPU waited for it
            dev_info[f"starved_{role}"] += 1
    return {"ref": dev_ref, "cand": t_cand}


def timed_blocks(s: Session, result: EvalResult, cal: Calibration) -> tuple[PairedStats, dict]:
    """Blocks until the score's interval is tight enough (target_ci) or budget_s is spent. A block: both workers
    stage k x B fresh input sets (same seed), then B *pairs* of timed spans of k calls, strictly alternating from
    a random start and close together in time (slow drifts of the machine hit both sides of a pair alike), then both
    digest: every output's structure and a random sample of calls digested with fresh weights, compared with the
    reference's; a random share of blocks (at least one) also has one call audited elementwise. The first blocks
    are a warm-up and not counted (see warmup_blocks_max).

    Long because: it is the timed protocol itself, kept in one place to be read and audited as a whole; its
    steps are the session's methods (stage, go, digest, hold). Reshaping it means re-measuring on a GPU."""
    cfg, k = s.cfg, cal.k
    B = cal.spans
    go = {"ref": [], "cand": []}
    harness = {"ref": [], "cand": []}
    # CPU seconds of each side's stage + digest per span (the kernel's per-process clock; diagnostic, version 6):
    # the same harness code on both sides, so unlike the spans its CPU time should move with the host alike
    harness_cpu = {"ref": [], "cand": []}
    waits: list[float] = []
    probes: list[dict] = []  # host_probe, per counted block
    ref_first: list[bool] = []
    block_of: list[int] = []
    audits, audit_block = 0, 1 + s.rng.randrange(max(1, cfg.min_rounds // B))
    st, stop, blocks, t_start = None, "budget", 0, time.monotonic()
    settled_from = 0  # SETTLE_CHARGES: the rounds counted when a charge first held the stop back
    # Warm-up (warmup_blocks_max): uncounted blocks until both sides' spans stop moving between blocks.
    warming, prev_spans, warmup_blocks = True, None, 0
    both = (s.ref, s.cand)
    expect = {"ref": cal.ref_baseline * k, "cand": cal.ref_baseline * k}  # span lengths: how long the parent spins
    # EvalConfig.clock = "device": the spans' times are the workers' device-clock seconds behind a spin kernel,
    # checked against the parent's own seconds pair by pair (device_times). ``queued``: each side's host
    # queueing time per span (the spin's length follows it).
    device_clock = uses_device_clock(s)
    # EvalConfig.clock = "held" (kernelrl/evaluation/held.py): every phase of the block is held by the holder and
    # timed on its GPU events; each pair's times (and the candidate's charges) come from held.pair_times
    held = uses_held_clock(s)
    ovh = 0.0 if device_clock or held else cal.overhead

    # HELD_SPAN_OVERHEAD: each counted block's empty held span per side (the fixed cost of a span)
    empties: dict[str, list[float]] = {"ref": [], "cand": []}

    def span_overhead() -> float:
        return held_span_overhead(empties["ref"], empties["cand"], go["ref"], go["cand"]) if held else 0.0

    def stats_of(go, harness, k, block_of) -> PairedStats:
        if held:  # GPU times; the candidate's charges (held.charges: aggregate checks) on its spans and harness
            c_go = sum(charges(s.book, "go").values())
            c_h = sum(sum(charges(s.book, kind).values()) for kind in ("stage", "digest", "empty")) / B
            o = span_overhead()
            return paired_totals([g - o for g in go["ref"]], [g - o + c_go for g in go["cand"]], harness["ref"],
                                 [h + c_h for h in harness["cand"]], k, block_of, robust=True,
                                 allowance=SPAN_BIAS_SHARE)
        if device_clock:  # totals over blocks, the harness excess charged on them (stats.paired_totals)
            return paired_totals(go["ref"], go["cand"], harness["ref"], harness["cand"], k, block_of)
        # on a CPU, work_moved_out also asks the harness phases' CPU time (stats.PairedStats.work_moved_out)
        cpu_h = (None, None) if s.device.startswith("cuda") else (harness_cpu["ref"], harness_cpu["cand"])
        return paired_stats(go["ref"], go["cand"], harness["ref"], harness["cand"], k, ovh, block_of,
                            span_cap=HARNESS_ALLOWANCE, ref_harness_cpu=cpu_h[0],
                            cand_harness_cpu=cpu_h[1])
    # the reference's own queueing time from calibration's device-clock spans (its wall time made spans mostly spin)
    q0 = cal.ref_queue if cal.ref_queue > 0 else cal.ref_baseline * k
    queued = {"ref": q0, "cand": q0}
    dev_info = {"spin": [], "starved_ref": 0, "starved_cand": 0, "outside_ref": [], "outside_cand": [], "charged": [],
                "spin_short": 0, "cpu_ref": [], "cpu_cand": [], "cpu_charged": []}
    while True:
        if time.monotonic() > s.deadline:
            raise CandidateFailed("timeout", "evaluation exceeded its absolute wall-clock cap")
        tmo = {"ref": s._left(cfg.max_wall_s), "cand": run_timeout(s, cal, k * B)}
        seed = s.rng.randrange(2**31)
        if HOST_PROBE:
            hp, _ = s._req(s.ref, {"cmd": "probe"}, timeout=s._left(30), harness=True)
            probe = {key: hp.get(key) for key in ("py_us", "launch_us") if hp.get(key) is not None}
        h_time = {}
        s.extra = {"ref": 0.0, "cand": 0.0}
        s.harness_cpu = {"ref": 0.0, "cand": 0.0}
        hold = s.holds() if held else {}
        phases: dict[str, dict] = {"stage": {}, "digest": {}}
        for w in s.rng.sample(both, 2):
            if held:
                hs, phases["stage"][w.role] = s.held_harness(w, {"cmd": "stage", "seed": seed, "k": k * B},
                                                             tmo[w.role], hold["stage"])
                s.note_queue("stage", w, hs)
                h_time[w.role] = 0.0
            else:
                h_time[w.role] = s.stage(w, k * B, seed, tmo[w.role])
        pairs = []
        # Strict alternation (R C R C ... or C R C R ..., the first side drawn per block): every span follows a
        # span of the other side, so both sides are timed in the same condition (caches just used by the other
        # process, the candidate just thawed or frozen). ABBA or random orders mix "after my own span" with
        # "after the other's" and widen the ratios' spread; this costs no more (one freeze, one thaw per pair).
        order = s.rng.sample(both, 2)
        spin = device_spin(cfg, max(queued["ref"], min(queued["cand"], 10 * queued["ref"]))) if device_clock else None
        walls = {"ref": [], "cand": []}
        q_block = {"ref": [], "cand": []}
        for i in range(B):
            t, replies = {}, {}
            for w in order:
                t[w.role], waited, replies[w.role] = s.go(w, k, tmo[w.role], expect[w.role] + (spin or 0.0), spin,
                                                          hold_s=hold.get("go"))
                walls[w.role].append(t[w.role] - (replies[w.role]["phase"].nominal if held else 0.0))
                if waited:
                    waits.append(waited)
                if held:
                    s.note_queue("go", w, replies[w.role])
            if device_clock:
                t = device_times(t, replies, spin, dev_info, q_block, HARNESS_ALLOWANCE)
            elif held:
                t["ref"], t["cand"] = pair_times("go", replies["ref"]["phase"], replies["cand"]["phase"], s.book)
            pairs.append((t["ref"], t["cand"], order[0] is s.ref))
        empty_now = {}
        if held and HELD_SPAN_OVERHEAD:
            # One empty held span per side (n = 0: GO, the worker's wait, DONE; no call), in random order after the
            # block's spans: its GPU time is the fixed cost every span of that side carries (span_overhead).
            empty_ph = {}
            for w in s.rng.sample(both, 2):
                _, _, rep = s.go(w, 0, tmo[w.role], 0.0, None, hold_s=EMPTY_HOLD_S)
                work = rep["phase"].work
                empty_ph[w.role] = rep["phase"]
                if math.isfinite(work) and work >= 0:
                    empty_now[w.role] = work
            # booked for the drain check (held.charges "empty"): the holder's wait before them follows the
            # block's last span, and work the candidate left queued after it would otherwise be on no clock
            pair_times("empty", empty_ph["ref"], empty_ph["cand"], s.book)
        for role in ("ref", "cand"):
            expect[role] = statistics.median(walls[role]) - (spin or 0.0)
            if device_clock and q_block[role]:
                queued[role] = statistics.median(q_block[role])
        calls = sorted(s.rng.sample(range(k * B), min(k * B, DIGEST_SAMPLE)))
        dseed = s.rng.randrange(2**40)
        reply = {}
        for w in s.rng.sample(both, 2):
            if held:
                reply[w.role], phases["digest"][w.role] = s.held_harness(
                    w, {"cmd": "digest", "dseed": dseed, "calls": calls}, tmo[w.role], hold["digest"])
                s.note_queue("digest", w, reply[w.role])
            else:
                dt, reply[w.role] = s.digest(w, dseed, calls, tmo[w.role])
                h_time[w.role] += dt
        if held:  # GPU seconds of both harness phases; the candidate's with its charges (held.pair_times)
            for kind in ("stage", "digest"):
                tr, tc = pair_times(kind, phases[kind]["ref"], phases[kind]["cand"], s.book)
                h_time["ref"] += tr
                h_time["cand"] += tc
                for role in ("ref", "cand"):
                    s.harness_cpu[role] += phases[kind][role].cpu
        for role in h_time:  # the quiesce requests, and the candidate's leftover GPU work drained for it
            h_time[role] += s.extra[role]
        bad = compare_digests(reply["ref"], reply["cand"], calls)
        if bad:
            raise CandidateFailed("timing-mismatch", f"timing block {blocks + 1}: {bad}")
        if s.rng.random() < AUDIT_FRACTION or blocks == audit_block:
            s.audit(k * B, blocks + 1, result, seed)
            audits += 1
        blocks += 1
        if warming:
            # Warm when each side's spans of this block and the previous one all lie within +-tolerance of
            # their middle (a block's median of 2 spans is their mean: one slow span hid in it).
            spans_now = {"ref": [p[0] for p in pairs], "cand": [p[1] for p in pairs]}
            settled = prev_spans is not None and all(
                max(v) <= min(v) * (1 + WARMUP_TOLERANCE) / (1 - WARMUP_TOLERANCE)
                for v in (spans_now[r] + prev_spans[r] for r in spans_now))
            prev_spans = spans_now
            # k again from the reference's spans of the first warm-up block: calibration ran while the
            # candidate's worker was starting (on a 2-core VM beside it: k came out 2 instead of 5 now and then,
            # and 1.3 ms spans gave LayerNorm lower bounds 15% under its long run).
            if blocks == 1 and not (s.replay["cand"] or s.replay["ref"]):  # graphs: captured for this k
                k_new = min(cal.k_held_cap, calls_per_span(cfg, cal.k_mem,
                                                             max(statistics.median(spans_now["ref"]) - ovh, 1e-9) / k))
                if abs(k_new - k) > 0.3 * k:
                    s.queue0["go"] *= k_new / k
                    for role in expect:
                        expect[role] *= k_new / k
                        queued[role] *= k_new / k
                        s.queue["go"][role] = [q * k_new / k for q in s.queue["go"][role]]
                    result.timing["calls_per_round_at_calibration"] = k
                    k = cal.k = k_new
                    prev_spans, settled = None, False
            if not settled:  # not counted; at the cap the warm-up ends with this block
                s.book.discard()
                t_start = time.monotonic()
                warming, warmup_blocks = blocks < max(1, WARMUP_BLOCKS_MAX), blocks
                continue
            warming, warmup_blocks = False, blocks - 1
        s.book.commit()
        for role, work in empty_now.items():
            empties[role].append(work)
        for tr, tc, rf in pairs:
            go["ref"].append(tr)
            go["cand"].append(tc)
            ref_first.append(rf)
            block_of.append(len(harness["ref"]))
        for role in ("ref", "cand"):
            harness[role].append(h_time[role] / B)  # per timed span, to compare with the spans
            harness_cpu[role].append(s.harness_cpu[role] / B)
        if HOST_PROBE:
            probes.append(probe)
        m = len(go["ref"])
        elapsed = time.monotonic() - t_start
        if s.progress:
            s.progress(0.3 + 0.7 * min(1.0, elapsed / max(cfg.budget_s, 1e-9)), "timing")
        if m < cfg.min_rounds:
            continue
        if m >= MAX_ROUNDS:
            stop = "max_rounds"
            break
        if elapsed >= cfg.budget_s:
            stop = "budget"
            break
        if cfg.target_ci > 0 and elapsed >= MIN_TIMING_S:
            st = stats_of(go, harness, k, block_of)
            if st.rel_halfwidth <= cfg.target_ci:
                # SETTLE_CHARGES: a charge at the stopping point times on to 2 x min_rounds first
                if held and SETTLE_CHARGES and settle_more(s.book, m, cfg.min_rounds):
                    settled_from = settled_from or m
                    continue
                stop = "interval"
                break
    st = stats_of(go, harness, k, block_of)
    ratios = [r / c for r, c in zip(go["ref"], go["cand"]) if c > 0]
    if s.keep_rounds:  # raw parent-clock seconds, for analysis of the estimator (git: bench/analyze_rounds.py)
        st_raw = {"ref": [[round(g, 7), 0.0] for g in go["ref"]], "cand": [[round(g, 7), 0.0] for g in go["cand"]],
                  "ref_first": ref_first, "harness_ref": [round(x, 7) for x in harness["ref"]],
                  "harness_cand": [round(x, 7) for x in harness["cand"]], "host_probe": probes,
                  "harness_cpu_ref": [round(x, 7) for x in harness_cpu["ref"]],
                  "harness_cpu_cand": [round(x, 7) for x in harness_cpu["cand"]]}
        if held:  # [kind, before whose phase, after which phase, waited, first probe (us), probes] (holder_drain)
            st_raw["drains"] = s.drain_log
            # each counted pair of spans' holds, [reference's, candidate's] (us): where a stretch charge came from
            st_raw["holds"] = [[round(r["hold_r"] * 1e6, 1), round(r["hold_c"] * 1e6, 1)] for r in s.book.pairs["go"]]
    info = {"stop": stop, "timing_s": round(time.monotonic() - t_start, 3), "audits": audits, "blocks": blocks,
            "warmup_blocks": warmup_blocks,
            "spans_per_block": B, "forward_transient_mib": cal.transient >> 20,
            "quiesce_wait_ms_max": round(max(waits, default=0.0) * 1e3, 3),
            "quiesce_wait_ms_median": round(statistics.median(waits) * 1e3, 3) if waits else 0.0,
            "ref_harness_ms": round(statistics.median(harness["ref"]) * 1e3, 4),
            "cand_harness_ms": round(statistics.median(harness["cand"]) * 1e3, 4),
            **{f"{r}_harness_cpu_ms": round(statistics.median(harness_cpu[r]) * 1e3, 4) if harness_cpu[r] else 0.0
               for r in ("ref", "cand")},
            **bucket_stats(ratios, BUCKETS).to_dict()}
    if held:
        info.update(held_info(s.book, k))
        if settled_from:
            info["settle_from_rounds"] = settled_from
        if empties["ref"] and empties["cand"]:
            # each side's fixed span cost (held.empty_floor: the lower quartile of its empty spans; the median up to 21)
            info.update(empty_span_ms_ref=round(empty_floor(empties["ref"]) * 1e3, 4),
                        empty_span_ms_cand=round(empty_floor(empties["cand"]) * 1e3, 4),
                        span_overhead_ms=round(span_overhead() * 1e3, 4))
            # report only: every counted block's empty spans (the floors above hide how many were slow) and
            # whether SPAN_OVERHEAD_CAP bound (then the score rests on the cap; H100 2026-12-06, v21: a 2x score)
            info["empty_spans_ms"] = {r: [round(e * 1e3, 4) for e in empties[r][:24]] for r in ("ref", "cand")}
            if span_overhead_capped(empties["ref"], empties["cand"], go["ref"], go["cand"]):
                info["span_overhead_capped"] = True
        cand_med = statistics.median(go["cand"]) if go["cand"] else 0.0
        ch = charges(s.book, "go")
        if ch["stretch"] + ch["outside"] > 0.05 * cand_med:
            info["held_clock_disagrees"] = True
        if ch["cpu"] > 0.05 * cand_med:
            info["host_bound"] = True
    if device_clock:
        med_ms = lambda xs: round(statistics.median(xs) * 1e3, 5) if xs else None  # noqa: E731
        n_spans = max(1, len(dev_info["outside_ref"]))
        mean_ms = lambda xs: round(statistics.fmean(xs) / k * 1e3, 6) if xs else 0.0  # noqa: E731
        info.update(clock="device", device_spin_ms=med_ms(dev_info["spin"]),
                    device_spin_spread=round(robust_sd(dev_info["spin"]) / max(statistics.median(dev_info["spin"]),
                                                                             1e-12), 6) if dev_info["spin"] else 0.0,
                    starved_share_ref=round(dev_info["starved_ref"] / n_spans, 4),
                    starved_share_cand=round(dev_info["starved_cand"] / n_spans, 4),
                    outside_ms_ref=med_ms(dev_info["outside_ref"]), outside_ms_cand=med_ms(dev_info["outside_cand"]),
                    outside_charge_ms=mean_ms(dev_info["charged"]), spin_short_spans=dev_info["spin_short"],
                    host_cpu_ms_ref=med_ms(dev_info["cpu_ref"]), host_cpu_ms_cand=med_ms(dev_info["cpu_cand"]),
                    host_charge_ms=mean_ms(dev_info["cpu_charged"]))
        if dev_info["cpu_ref"] and dev_info["cpu_cand"]:
            # what the two sides' host work per span compares like: the wall-clock speedup of launch-bound pairs
            # follows this more than the GPU's (diagnostic)
            info["host_cpu_ratio"] = round(statistics.median(dev_info["cpu_ref"]) /
                                           max(statistics.median(dev_info["cpu_cand"]), 1e-12), 4)
        cand_med = statistics.median(go["cand"]) if go["cand"] else 0.0
        if dev_info["spin_short"] or (dev_info["charged"] and statistics.fmean(dev_info["charged"]) > 0.05 * cand_med):
            info["device_clock_disagrees"] = True
        if dev_info["cpu_charged"] and statistics.fmean(dev_info["cpu_charged"]) > 0.05 * cand_med:
            info["host_bound"] = True
    if probes:
        info["host_probe"] = {}
        for key in ("py_us", "launch_us"):
            vals = [p[key] for p in probes if p.get(key)]
            if vals:
                info["host_probe"][key] = round(statistics.median(vals), 3)
                info["host_probe"][key.replace("_us", "_spread")] = round(max(vals) / min(vals) - 1, 4)
    if s.keep_rounds:
        info["rounds_raw"] = st_raw
    return st, info
