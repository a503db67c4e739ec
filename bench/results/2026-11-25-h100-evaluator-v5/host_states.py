"""Per evaluation of an evaluator benchmark (rows.jsonl with timing.rounds_raw and host_probe): the median block
ratio over blocks where the host probe read fast (Python loop under THRESHOLD us) and where it read slow.

    python host_states.py call1/bench/rows.jsonl [THRESHOLD_US]
"""
import json
import math
import statistics as st
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
thr = float(sys.argv[2]) if len(sys.argv) > 2 else 800
for row in rows:
    print(row["task"])
    for name, r in [(f"r{i}", x) for i, x in enumerate(row["repeats"])] + [("long", row.get("long"))]:
        if not r or not r.get("rounds_raw"):
            continue
        raw = r["rounds_raw"]
        nb = len(raw["host_probe"])
        b = len(raw["ref"]) // nb
        fast, slow = [], []
        for i in range(nb):
            rs = [x[0] for x in raw["ref"][i * b:(i + 1) * b]]
            cs = [x[0] for x in raw["cand"][i * b:(i + 1) * b]]
            ratio = math.exp(st.mean(math.log(a / c) for a, c in zip(rs, cs)))
            (fast if raw["host_probe"][i]["py_us"] < thr else slow).append(ratio)
        f = st.median(fast) if fast else float("nan")
        s = st.median(slow) if slow else float("nan")
        print(f"  {name:5s} score {r['score_raw'] or 0:.3f}  fast n={len(fast):3d} med {f:.3f}   "
              f"slow n={len(slow):3d} med {s:.3f}")
