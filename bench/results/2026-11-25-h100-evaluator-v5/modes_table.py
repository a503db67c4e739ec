"""Markdown table of a bench/timer_modes.py run: per pair and mode the median of the 5 evaluations, max/min - 1
of the 5 (dev) and |median / the 5x run - 1| (agree); then per mode how many pairs meet 2% and 3%.

    python modes_table.py call3/modes/rows.jsonl.gz
"""
import gzip
import json
import statistics
import sys

MODES = ("wall", "events", "graph", "blocked", "blocked_fed", "hybrid")
opener = gzip.open if sys.argv[1].endswith(".gz") else open
rows = [json.loads(line) for line in opener(sys.argv[1], "rt")]
print("| task | seed | k | " + " | ".join(f"{m} (dev, agree)" for m in MODES) + " | starved blocks |")
print("|---|---|---:|" + "---|" * len(MODES) + "---|")
cnt = {m: [0, 0, 0] for m in MODES}
for r in rows:
    if "error" in r:
        print(f"| {r['task'][8:]} | {r['seed']} | - | error: {r['error'].strip().splitlines()[-1][:80]} |")
        continue
    cells = []
    for m in MODES:
        vals = [e.get(m) for e in r["evals"]]
        if None in vals or f"{m}_dev" not in r:
            cells.append("-")
            continue
        d, a = r[m + "_dev"], r.get(m + "_agree", float("nan"))
        cnt[m][0] += 1
        cnt[m][1] += d <= 0.02
        cnt[m][2] += a <= 0.03
        cells.append(f"{statistics.median(vals):.3f} ({d * 100:.1f}%, {a * 100:.1f}%)")
    starved = sum(e["starved"] for e in r["evals"])
    nb = sum(e["blocks"] for e in r["evals"])
    print(f"| {r['task'][8:]} | {r['seed']} | {r['k']} | " + " | ".join(cells) + f" | {starved}/{nb} |")
print()
print("| mode | pairs | repeats within 2% | median within 3% of the 5x run |")
print("|---|---:|---:|---:|")
for m in MODES:
    n, a, b = cnt[m]
    print(f"| {m} | {n} | {a} | {b} |")
