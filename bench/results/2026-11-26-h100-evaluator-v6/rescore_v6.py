"""Where the v6 host-clock benchmark's spread comes from: every repeat re-scored from its kept rounds as measured,
without the harness charge, and with a ratio of totals over blocks (paired_totals), then max/min - 1 of each
task's repeats under each rule.

    python bench/results/2026-11-26-h100-evaluator-v6/rescore_v6.py
"""
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[1])]

from rescore_harness import _repeats, kept_rounds  # noqa: E402

from kernelrl.evaluation.stats import paired_stats, paired_totals  # noqa: E402

rows: dict[str, dict[str, list[float]]] = {}
for row, rep, raw, clock in _repeats(HERE / "bench" / "rows.jsonl"):
    ref, cand, bo, k, ov = kept_rounds(rep, raw, clock)
    r = rows.setdefault(row["task"], {"as measured": [], "no charge": [], "no charge, estimate": [], "totals": []})
    base = paired_stats(ref, cand, raw["harness_ref"], raw["harness_cand"], k, ov, bo)
    none = paired_stats(ref, cand, raw["harness_ref"], raw["harness_ref"], k, ov, bo)
    tot = paired_totals([x - ov for x in ref], [x - ov for x in cand], raw["harness_ref"], raw["harness_cand"], k, bo)
    r["as measured"].append(base.ci_low)
    r["no charge"].append(none.ci_low)
    r["no charge, estimate"].append(none.estimate)
    r["totals"].append(tot.ci_low)
print(f"{'task':58s} " + " | ".join(f"{k:>20s}" for k in next(iter(rows.values()))))
spread = {k: [] for k in next(iter(rows.values()))}
for task, r in rows.items():
    cells = []
    for key, xs in r.items():
        d = max(xs) / min(xs) - 1 if xs and min(xs) > 0 else float("inf")
        spread[key].append(d)
        cells.append(f"{d:20.3f}")
    print(f"{task[-58:]:58s} " + " | ".join(cells))
print(f"{'median over tasks':58s} " + " | ".join(f"{statistics.median(v):20.3f}" for v in spread.values()))
print(f"{'tasks within 2%':58s} " + " | ".join(f"{sum(d <= 0.02 for d in v):20d}" for v in spread.values()))
