"""Phase 5, re-verification (after the first measurement's workers are closed): a large speedup is measured
again in fresh processes; the lower of the two is kept (stats.reverify_verdict)."""

from __future__ import annotations

import dataclasses

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation.result import EvalResult
from kernelrl.evaluation.stats import judge_reverify


def reverify(task_source: str, cand_source: str, cfg: EvalConfig, device: str, result: EvalResult) -> None:
    """Re-measure a large speedup in fresh processes and keep the lower of the two; flagged when they disagree
    (stats.reverify_verdict: agreeing within tolerance, within the two intervals, or the reference's own drift),
    scored 0 when the re-measurement failed."""
    from kernelrl.evaluation.api import evaluate  # the whole protocol again (api imports this module)

    second = evaluate(task_source, cand_source, dataclasses.replace(cfg, reverify=False, correctness_trials=2),
                      eager_estimate=False)  # its score alone is compared; the first measurement's estimate stands
    v, record = judge_reverify(result.speedup, result.timing, second.speedup, second.success, second.timing,
                               cfg.reverify_tolerance, mode="fresh-process", second_flags=second.flags,
                               second_error=second.error)
    record["wall_s"] = second.wall_s  # a wait for the compile cache shows here (compile_timeout_s at most)
    result.timing["reverify_speedup"] = second.speedup
    result.timing["reverify"] = record
    if v.flag:
        result.flag(v.flag)
    result.speedup = v.kept
