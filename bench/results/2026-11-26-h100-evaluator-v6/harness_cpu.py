"""Call 8: is the harness phases' CPU time (the kernel's per-process clock) a quieter check than their wall time?
Per repeat: the candidate's excess over the reference (per span) by wall clock and by CPU time, its median and
robust spread, against the candidate's own span.

    python bench/results/2026-11-26-h100-evaluator-v6/harness_cpu.py
"""
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent


def rsd(xs):
    m = statistics.median(xs)
    return 1.4826 * statistics.median(abs(x - m) for x in xs)


print(f"{'task':36s} {'span ms':>8s} | {'wall: excess med':>16s} {'sd':>7s} | {'cpu: excess med':>15s} {'sd':>7s} | "
      f"{'ref harness wall':>16s} {'cpu':>7s}")
for line in open(HERE / "call8-harness-cpu" / "bench" / "rows.jsonl"):
    row = json.loads(line)
    for rep in row["repeats"]:
        raw = rep["rounds_raw"]
        hw = [(c - r) * 1e3 for r, c in zip(raw["harness_ref"], raw["harness_cand"])]
        hc = [(c - r) * 1e3 for r, c in zip(raw["harness_cpu_ref"], raw["harness_cpu_cand"])]
        span = statistics.median(x[0] for x in raw["cand"]) * 1e3
        print(f"{row['task'][-36:]:36s} {span:8.3f} | {statistics.median(hw):16.3f} {rsd(hw):7.3f} | "
              f"{statistics.median(hc):15.3f} {rsd(hc):7.3f} | {statistics.median(raw['harness_ref']) * 1e3:16.3f} "
              f"{statistics.median(raw['harness_cpu_ref']) * 1e3:7.3f}")
