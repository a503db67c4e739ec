"""Phase 4, the verdict (with the workers still up): the reference's clean baseline again after the rounds
(interference), the flags that the timing's numbers imply, and the score."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

from kernelrl.evaluation.calibrate import uses_device_clock, device_spin, uses_held_clock, itemsize
from kernelrl.evaluation.result import EvalResult
from kernelrl.evaluation.sandbox import kill_orphans
from kernelrl.evaluation.stats import PairedStats, round_toward_one

if TYPE_CHECKING:
    from kernelrl.evaluation.calibrate import Calibration
    from kernelrl.evaluation.session import Session


def verdict(s: Session, result: EvalResult, cal: Calibration, st: PairedStats, info: dict) -> None:
    """Score and flags: the interval's lower bound rounded toward 1; harness excess, interval width,
    interference against the reference's clean baselines, the task audit and the bandwidth floor."""
    cfg, k = s.cfg, cal.k
    score = round_toward_one(st.score)
    result.timing = result.timing | st.to_dict() | info | {  # kept: what correctness recorded (its split)
        "calls_per_round": k,
        "overhead_ms": round(cal.overhead * 1e3, 5),
        "ref_baseline_ms": round(cal.ref_baseline * 1e3, 6),
    }
    # Work moved out of the timed spans (charged already, block by block): the flag says the candidate's harness
    # time is above the reference's beyond noise in most blocks, by more than 1% of its own time. When the
    # excess is larger than the candidate's own spans, the work runs outside the clock: scored 0 (the charge
    # bills it at what it cost there, cache-hot right after staging: 1.2-1.6x under its cost in a span on CPU).
    if st.excess_per_call > st.excess_se_per_call and st.charge_per_call > 0.01 * st.cand_per_call:
        result.flag("harness-time-excess")
    if st.work_moved_out:
        result.flag("work-outside-timing")
    if info.get("device_clock_disagrees"):
        result.flag("device-clock-disagrees")
    if info.get("held_clock_disagrees"):
        result.flag("held-clock-disagrees")
    if info.get("host_bound"):
        result.flag("host-bound")
    if st.rel_halfwidth > cfg.spread_threshold:
        result.flag("unstable-timing")
    # Interference: the paired reference against its clean times, measured before the candidate existed and
    # again now with the candidate frozen and its orphans killed. A machine that got slower on its own slows the
    # second baseline too; a candidate that loaded the device slows only the paired rounds.
    s.cand.freeze()
    if kill_orphans({w.pid for w in (s.ref, s.cand)} | s.before):
        result.flag("leftover-processes")
    if uses_held_clock(s):  # the same clock as the paired spans (st.ref_per_call)
        post = s.ref_block_held(k, cal.spans)
        s.cand.thaw()
        ref_post = max(statistics.median(post), 1e-9) / k
        slowdown = st.ref_per_call / max(cal.ref_dev_baseline, ref_post)
    elif uses_device_clock(s):  # the same clock as the paired spans (st.ref_per_call)
        post = s.ref_block(k, cal.spans, cal.ref_baseline * k, device_spin(cfg, cal.ref_baseline * k))
        s.cand.thaw()
        ref_post = max(statistics.median(post), 1e-9) / k
        slowdown = st.ref_per_call / max(cal.ref_dev_baseline, ref_post)
    else:
        post = s.ref_block(k, cal.spans)
        s.cand.thaw()
        ref_post = max(statistics.median(post) - cal.overhead, 1e-9) / k
        slowdown = st.ref_per_call / max(cal.ref_baseline, ref_post)
    result.timing.update(ref_post_baseline_ms=round(ref_post * 1e3, 6), ref_slowdown=round(slowdown, 4))
    if slowdown > cfg.interference_factor and score > 1.0:
        result.flag("reference-slowed")
    if "task-input-independent" in result.flags:
        score = min(score, 1.0)
    if s.device.startswith("cuda"):
        hb, _ = s._req(s.ref, {"cmd": "bandwidth"}, timeout=s._left(60), harness=True)
        bw = hb.get("bytes_per_s")
        if bw:
            min_bytes = cal.in_bytes + sum(math.prod(m[0]) * itemsize(m[1]) for m in cal.out_meta)
            floor_s = min_bytes / bw
            result.timing["speed_of_light_ms"] = round(floor_s * 1e3, 6)
            if st.cand_per_call < 0.5 * floor_s:
                result.flag("faster-than-light")
    result.speedup = score
