"""Where the held clock's spread comes from (no device time): per task, the spread (max/min - 1) of the reported
scores against the spread of the plain GPU-work ratios (median reference span / median candidate span, the holder's
events, no charges), over the repeats of one bench call.

    cd bench/results/2026-11-26-h100-evaluator-v7 && python held_ratios.py call6/bench/rows.jsonl
"""
import json
import sys

for line in open(sys.argv[1]):
    r = json.loads(line)
    reps = [x for x in r["repeats"] if x.get("held") and x["success"]]
    if len(reps) < 2:
        continue
    scores = [x["score_raw"] for x in reps]
    ratios = [x["held"]["held_work_ms_ref"] / x["held"]["held_work_ms_cand"] for x in reps]
    ks = [x["k"] for x in reps]
    print(f"{r['task'].split('/')[-1]:28s} scores {max(scores) / min(scores) - 1:6.3f}  GPU-work ratios "
          f"{max(ratios) / min(ratios) - 1:6.3f}  ({', '.join(f'{v:.3f}' for v in ratios)}; k {ks})")
