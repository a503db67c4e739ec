"""Phase 5, re-verification (after the first measurement's workers are closed): a large speedup is measured
again in fresh processes and kept only where the two agree (stats.reverify_verdict)."""

from __future__ import annotations

import dataclasses

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation.result import EvalResult
from kernelrl.evaluation.stats import judge_reverify


def reverify(task_source: str, cand_source: str, cfg: EvalConfig, device: str, result: EvalResult) -> None:
    """Re-measure a large speedup in fresh processes; keep the lower of the two only if they agree
    (stats.reverify_verdict: within tolerance, within the two intervals, or the reference's own drift)."""
    from kernelrl.evaluation.api import evaluate  # the whole protocol again (api imports this module)

    second = evaluate(task_source, cand_source, dataclasses.replace(cfg, reverify=False, correctness_trials=2),
                      eager_estimate=False)  # its score alone is compared; the first measurement's estimate stands
    v, record = judge_reverify(result.speedup, result.timing, second.speedup, second.success, second.timing,
                               cfg.reverify_tolerance, mode="fresh-process")
    result.timing["reverify_speedup"] = second.speedup
    result.timing["reverify"] = record
    if not v.agree:
        result.flag("reverify-mismatch")
    result.speedup = v.kept
