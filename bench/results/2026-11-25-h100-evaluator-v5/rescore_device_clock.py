"""Call 4 (the device clock) re-scored from its kept rounds: as measured, without the harness (staging/digest)
charge, and with the harness allowance capped at 5x the candidate's span instead of 0.2x.

    python bench/results/2026-11-25-h100-evaluator-v5/rescore_device_clock.py
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[1])]

from rescore_harness import _repeats, kept_rounds  # noqa: E402

from kernelrl.evaluation.stats import paired_stats  # noqa: E402

for row, rep, raw, clock in _repeats(HERE / "call4" / "bench" / "rows.jsonl"):
    ref, cand, bo, k, ov = kept_rounds(rep, raw, clock)
    base = paired_stats(ref, cand, raw["harness_ref"], raw["harness_cand"], k, ov, bo)
    none = paired_stats(ref, cand, raw["harness_ref"], raw["harness_ref"], k, ov, bo)
    wide = paired_stats(ref, cand, raw["harness_ref"], raw["harness_cand"], k, ov, bo, span_cap=5.0)
    print(f"{row['task']}: as measured {base.ci_low:.3f} (estimate {base.estimate:.3f}) | no harness charge "
          f"{none.ci_low:.3f} ({none.estimate:.3f}) | allowance 5x span {wide.ci_low:.3f} ({wide.estimate:.3f})")
