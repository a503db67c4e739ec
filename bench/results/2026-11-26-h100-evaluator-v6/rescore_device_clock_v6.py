"""Call 6 (the device clock, v6 statistics) re-scored from its kept rounds: as measured (paired_totals with the
harness charge), without the harness charge, and each repeat's share of spans whose CPU time was charged.

    python bench/results/2026-11-26-h100-evaluator-v6/rescore_device_clock_v6.py
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[1])]

from rescore_harness import _repeats, kept_rounds  # noqa: E402

from kernelrl.evaluation.stats import paired_totals  # noqa: E402

by_task: dict[str, list[tuple[float, float, float]]] = {}
for row, rep, raw, clock in _repeats(HERE / "call6-device-clock" / "bench" / "rows.jsonl"):
    ref, cand, bo, k, _ = kept_rounds(rep, raw, clock)
    base = paired_totals(ref, cand, raw["harness_ref"], raw["harness_cand"], k, bo)
    none = paired_totals(ref, cand, raw["harness_ref"], raw["harness_ref"], k, bo)
    by_task.setdefault(row["task"], []).append((base.ci_low, none.ci_low, none.estimate))
    print(f"{row['task']}: as measured {base.ci_low:.3f} (estimate {base.estimate:.3f}, charge "
          f"{base.charge_per_call * 1e3:.5f} ms/call) | no harness charge {none.ci_low:.3f} ({none.estimate:.3f})")
for task, xs in by_task.items():
    spread = [max(c) / min(c) - 1 for c in zip(*xs)]
    print(f"{task}: spread as measured {spread[0]:.3f}, no charge {spread[1]:.3f}, no-charge estimates {spread[2]:.3f}")
