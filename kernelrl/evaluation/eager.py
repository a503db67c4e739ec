"""The eager estimate (issue 32; report-only, never rewarded), between phase 4 and 5: after the verdict, with
both workers still up, each side times eager forward calls on one fixed input set the way the paper and KernelBench
time a call (host dispatch included), so a user can set our tables beside published ones. The score, the flags and
the verdict are final before it starts, and nothing here changes them (``EVALUATOR_VERSION`` is unchanged: no score
can change).

``timing["eager"]`` = ``{"ref_ms", "cand_ms"}`` (median milliseconds per call), ``"speedup"`` (ref_ms / cand_ms),
``"calls"`` (per side), ``"blocks"``, ``"method"``; or ``{"error": ...}`` when a worker failed here (the evaluation
stands); absent when the phase did not run (off, the candidate failed or was not correct, a fatal flag). Its wall
time is ``timing.phases_s["eager"]``.

**Not trusted, and not the reward.** Each worker times its own calls (worker_eager.py): the candidate's worker runs
candidate code and can forge its own number. Acceptable for a number that is only reported; the parent checks the
reply's shape and range, nothing more. The reward stays on the trusted clocks (timing.py, held.py)."""

from __future__ import annotations

import math
import statistics
import time
from typing import TYPE_CHECKING

from kernelrl.evaluation import flags as F
from kernelrl.evaluation.calibrate import run_timeout
from kernelrl.evaluation.result import EvalResult

if TYPE_CHECKING:
    from kernelrl.evaluation.calibrate import Calibration
    from kernelrl.evaluation.session import Session


# On by default: users compare our tables with the paper's and KernelBench's, which time eager calls with the host in
# them, and on launch-bound tasks the two clocks differ by up to 3x (README, "What the score measures"). A module
# constant, not an EvalConfig knob: the evaluator's public knobs are capped at 20 (issue 34) and all 20 are taken;
# it costs at most ~EAGER_WALL_S per side of wall time and changes no score.
EAGER_ESTIMATE = True

# At most this many timed calls per side: KernelBench times 100 trials after its warm-up; a median over 100 calls is
# stable to a few percent for a report.
EAGER_CALLS = 100

# At most about this many seconds of wall per side (a side stops after the call that passes it; one call at least):
# the estimate is information, and a training evaluation is ~5-8 s in all (README, "Speed"), so a second for both
# sides is the most it should add. Slow tasks get fewer calls instead (``calls`` says how many).
EAGER_WALL_S = 0.5

# The calls of each side come in this many blocks, alternating ref, cand, ref, cand ...: a slow drift of the machine
# (the H100 VM's host switched speeds for seconds at a time) then hits both sides alike instead of one.
EAGER_BLOCKS = 4

# Untimed calls before each side's first block (KernelBench warms up with 3): the spans just replayed CUDA graphs,
# and an eager call after them may meet a cold allocator or cuDNN/cuBLAS choices not yet made.
EAGER_WARMUP = 3

# Skip the phase when less than this many seconds of max_wall_s are left: the reward is measured and must not be
# lost to a report-only phase that would run into the evaluation's cap.
EAGER_MIN_LEFT_S = 10.0


def method(device: str) -> str:
    """What was timed, in a few words (``timing.eager.method``)."""
    if device.startswith("cuda"):
        return ("KernelBench-style: CUDA events around one eager forward call, synchronize after; median over calls "
                "on one fixed input set; host included; each worker times itself (not trusted, not the reward)")
    return ("KernelBench-style on CPU: time.perf_counter around one eager forward call; median over calls on one "
            "fixed input set; each worker times itself (not trusted, not the reward)")


def measure_eager(s: Session, result: EvalResult, cal: Calibration) -> bool:
    """Run the phase when it applies (EAGER_ESTIMATE and ``s.eager_estimate`` on, the candidate correct, no fatal
    flag); record ``timing["eager"]``. Never raises: a failure of either worker here is recorded as
    ``{"error": ...}`` and the evaluation stands as measured. True when it ran (the caller marks its phase)."""
    if not (EAGER_ESTIMATE and s.eager_estimate) or not result.correct or set(result.flags) & F.FATAL:
        return False
    if s.cand is None or s.ref is None:
        return False
    if s.deadline - time.monotonic() < EAGER_MIN_LEFT_S:
        result.timing["eager"] = {"skipped": f"less than {EAGER_MIN_LEFT_S:.0f} s of max_wall_s left"}
        return False
    if s.progress:
        s.progress(1.0, "eager estimate")
    side = "reference"
    try:
        # Large sets (session.TRIM_MIN_BYTES): the timed blocks' sets, outputs and captured graphs go first, and the
        # allocators' caches with them: nothing reads them after the verdict, and beside them the eager set and its
        # outputs are one more set a worker on each side (version 23; an 80 GB H100 holds two workers' blocks of
        # KernelBench's largest tasks, not a third set each)
        s.trim(cal.set_bytes, s.ref, s.cand, graphs=True)
        est = {"ref": [], "cand": []}
        wall = {"ref": 0.0, "cand": 0.0}
        seed = s.rng.randrange(2**31)  # one input set, the same in both workers
        per_block, block_s = math.ceil(EAGER_CALLS / EAGER_BLOCKS), EAGER_WALL_S / EAGER_BLOCKS
        blocks = 0
        for b in range(EAGER_BLOCKS):
            for role in ("ref", "cand"):
                side = "reference" if role == "ref" else "candidate"
                worker = s.ref if role == "ref" else s.cand
                want = min(per_block, EAGER_CALLS - len(est[role]))
                warmup = EAGER_WARMUP if b == 0 else 0
                t0 = time.perf_counter()
                if s.device.startswith("cuda"):
                    # the other side's queued GPU work drains first (the candidate frozen while the reference runs):
                    # it would otherwise run beside this side's calls, inside its events
                    s.hold(worker)
                    s._quiesce(worker, 0.0)
                h, _ = s._req(worker, {"cmd": "eager", "seed": seed, "n": want, "warmup": warmup, "budget_s": block_s},
                              timeout=run_timeout(s, cal, want + warmup) + block_s, harness=role == "ref")
                wall[role] += time.perf_counter() - t0
                est[role] += _checked(h, want)
            blocks += 1
            if max(wall.values()) >= EAGER_WALL_S or min(len(v) for v in est.values()) >= EAGER_CALLS:
                break
    except Exception as e:  # noqa: BLE001 - report-only: whatever happens here, the evaluation stands
        result.timing["eager"] = {"error": f"{side}: {type(e).__name__}: {str(e).strip()}"[:600]}
        return True
    ref_ms, cand_ms = statistics.median(est["ref"]), statistics.median(est["cand"])
    result.timing["eager"] = {"ref_ms": round(ref_ms, 6), "cand_ms": round(cand_ms, 6),
                              "speedup": round(ref_ms / cand_ms, 4),
                              "calls": {"ref": len(est["ref"]), "cand": len(est["cand"])}, "blocks": blocks,
                              "method": method(s.device)}
    return True


def _checked(reply: dict, want: int) -> list[float]:
    """A worker's per-call milliseconds, checked for shape and range (between 1 and ``want`` finite, positive
    numbers); anything else is an error of this phase."""
    ms = reply.get("ms")
    if not isinstance(ms, list) or not 1 <= len(ms) <= want:
        raise ValueError(f"expected 1 to {want} call times, got {type(ms).__name__} "
                         f"{len(ms) if isinstance(ms, list) else ''}".strip())
    out = []
    for x in ms:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
            raise ValueError(f"a call time that is not a positive number: {x!r}"[:200])
        out.append(float(x))
    return out
