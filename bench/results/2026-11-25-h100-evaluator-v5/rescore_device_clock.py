"""Call 4 (the device clock) re-scored from its kept rounds: as measured, without the harness (staging/digest)
charge, and with the harness allowance capped at 5x the candidate's span instead of 0.2x.

    python bench/results/2026-11-25-h100-evaluator-v5/rescore_device_clock.py
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from kernelrl.evaluation.stats import paired_stats  # noqa: E402

for line in open(HERE / "call4" / "bench" / "rows.jsonl"):
    r = json.loads(line)
    for x in r["repeats"]:
        raw, k = x["rounds_raw"], x["k"]
        ref, cand = [a[0] for a in raw["ref"]], [a[0] for a in raw["cand"]]
        nb = len(raw["harness_ref"])
        bo = [i // (len(ref) // nb) for i in range(len(ref))]
        base = paired_stats(ref, cand, raw["harness_ref"], raw["harness_cand"], k, 0.0, bo)
        none = paired_stats(ref, cand, raw["harness_ref"], raw["harness_ref"], k, 0.0, bo)
        wide = paired_stats(ref, cand, raw["harness_ref"], raw["harness_cand"], k, 0.0, bo, span_cap=5.0)
        print(f"{r['task']}: as measured {base.ci_low:.3f} (estimate {base.estimate:.3f}) | no harness charge "
              f"{none.ci_low:.3f} ({none.estimate:.3f}) | allowance 5x span {wide.ci_low:.3f} ({wide.estimate:.3f})")
