"""Integrity flags: every finding the evaluator can attach to a result, with what it means.

A *fatal* flag scores the candidate 0 whatever it measured; the others are information (or cap the score).
"""

from __future__ import annotations

FLAGS: dict[str, str] = {
    # executability
    "build-failed": "the candidate file did not import or ModelNew could not be constructed",
    "extension-build-failed": ("a load_inline/Triton build inside the candidate failed "
                               "(even if it fell back to PyTorch)"),
    "crashed": "the candidate process died (segfault, os._exit, abort, killed by a signal)",
    "timeout": "the candidate exceeded its time limit (timeout_factor x reference time, or the absolute cap)",
    "out-of-memory": "the candidate ran out of host or GPU memory",
    "runtime-error": "forward() raised an exception",
    # correctness
    "wrong-output": "outputs differ from the reference beyond tolerance on a correctness input set",
    "shape-mismatch": "output shape, dtype or structure differs from the reference",
    "output-subclass": "an output is not a plain torch.Tensor (lazy or deferred tensor subclass)",
    "non-finite": "the output has NaN/inf where the reference has none",
    "correctness-trials-reduced": "the outputs are so large that fewer correctness input sets than configured "
    "were run (correctness.SHIP_BUDGET_BYTES, at least MIN_TRIALS; timing.correctness_trials_run says how many); "
    "information",
    "within-reference-variation": "a correctness set's outputs failed the tolerance but were as close to the "
    "reference as two runs of the reference itself on that set (compare.within_variation; "
    "timing.reference_variation); the set passed; information",
    "within-reference-precision": "a correctness set's (or audited call's) outputs failed the tolerance but were as "
    "close to the reference's answer in float64 as float32 gets on that problem (8x the reference's own float32 error "
    "over 4 samples, 2x for a reference that varies run to run past the bound, and within half a norm of the float64 "
    "answer or the reference's: compare.within_precision; "
    "timing.reference_variation); a near-cancelling reduction; the set passed; information",
    "timing-mismatch": "outputs produced during timing rounds differ from the reference on the same inputs "
    "(stale or cached results, state drift after the checked calls)",
    # timing integrity
    "reference-slowed": "the reference ran markedly slower beside the candidate than in its clean baseline "
    "(background load, leftover queued work, interference)",
    "harness-time-excess": "the candidate spent markedly longer than the reference in the harness phases around "
    "the timed span (staging its inputs, digesting its outputs): work moved out of the timed span, or a patched "
    "harness. The excess was charged to its time (the score includes it); information",
    "device-clock-disagrees": "clock='device': the parent's clock saw the candidate's spans take markedly longer "
    "than its device time (work on another stream, a patched timer; the excess is charged to its time), or "
    "shorter than the spin plus the device time it claimed (a skipped spin; the whole span is charged)",
    "held-clock-disagrees": "clock='held': the candidate's spans took markedly longer than the GPU time the "
    "holder measured: the holder's hold stretched (the candidate ran on the GPU during it instead of waiting) or "
    "the parent's clock saw work after the holder's end event (DONE written early, another stream); the excess is "
    "charged to its time; information",
    "host-bound": "clock='device' or 'held': the candidate's CPU time in its spans (read from the kernel) "
    "exceeded both the reference's and its own GPU time; the excess is charged to its time (host work while "
    "the spin or hold kept the GPU, or dispatch heavier than the reference's); information",
    "work-outside-timing": "the candidate's harness excess (median over blocks) was larger than its own timed "
    "spans and beyond the reference's harness noise: most of its cost fell outside the clock (a patched harness "
    "computing while inputs are staged, work deferred into the digest, a no-op synchronize; or outputs kept "
    "alive across blocks, whose fresh memory the harness touches first)",
    "faster-than-light": "the candidate's time is below the task's minimum bytes over the device's measured bandwidth",
    "reverify-mismatch": "the re-measurement in fresh processes (another GPU where there is one) failed or could "
    "not be made (a queue's re-verification job that failed): the score is not confirmed, scored 0 "
    "(timing.reverify)",
    "reverify-disagreed": "a re-measurement in fresh processes (another GPU where there is one) came out below the "
    "first by more than reverify_tolerance, outside both measurements' 95% intervals, and not explained by the "
    "reference's own run-to-run drift: the lower (the re-measurement) was kept; information (timing.reverify.why "
    "has both numbers; before evaluator version 20 such a result scored 0)",
    "unstable-timing": "the score's interval stayed wider than spread_threshold when the timing budget ran out; "
    "information: the score is the interval's lower bound either way",
    "leftover-processes": "the candidate left processes running after it finished (they were killed)",
    "reference-disturbed": "the reference failed or timed out after the candidate ran (device memory held, device "
    "left broken): scored 0",
    "evaluation-failed": "the evaluator itself failed on this candidate (a harness error; the error says where)",
    # task audit
    "task-input-independent": "the reference output does not depend on its inputs: speedups on this task are "
    "meaningless (capped at 1.0)",
    "reference-is-rounding": "a set failed where the reference's own float32 answer is further from its float64 "
    "answer than that answer's norm (timing.reference_variation.ref_f64_rel_norm > 1): the output is float32 "
    "rounding there, which only the reference's own order of operations reproduces; information (the verdict "
    "stands; KernelBench L2 23_Conv3d_GroupNorm_Mean, whose output is ~0 on every set)",
    # static findings (information; the runtime checks decide)
    "uses-side-stream": "the source creates CUDA streams",
    "uses-cuda-graph": "the source captures CUDA graphs",
    "changes-global-flags": "the source changes global torch backend flags (TF32, cuDNN, threads)",
    "touches-timing": "the source references clocks, synchronize or CUDA events",
    "inspects-objects": "the source walks live objects or frames (gc, inspect, sys._getframe)",
    "spawns-processes": "the source starts processes or threads",
}

FATAL = {
    "build-failed", "crashed", "timeout", "out-of-memory", "runtime-error", "wrong-output", "shape-mismatch",
    "output-subclass", "non-finite", "timing-mismatch", "reference-slowed", "faster-than-light",
    "reverify-mismatch", "reference-disturbed", "evaluation-failed", "work-outside-timing",
}

CAPPED = {"task-input-independent"}


def describe(flag: str) -> str:
    return FLAGS.get(flag, "unknown flag")
