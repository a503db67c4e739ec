"""Re-score the benchmark's recorded held spans with the span's fixed cost taken off (no device time): what
evaluator version 8 (EvalConfig.held_span_overhead) would have reported on the same spans. The fixed cost is the
empty held span measured in call 7 (0.2821-0.2837 ms on both sides, three evaluations). Per evaluation,
paired_totals(robust=True) on the recorded GPU times (rounds_raw; the held checks' aggregate charges are not in
them, so both re-scores leave them out), once as recorded (O = 0) and once with O off every span of both sides;
the long run likewise. Then the benchmark's keys from the re-scores.

    cd bench/results/2026-11-26-h100-evaluator-v8 && python rescore_v8.py benchmark/rows.jsonl
"""
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from kernelrl.evaluation import stats  # noqa: E402

O_S = 0.283e-3  # call 7: empty_span_ms 0.2821-0.2837 (ref and cand alike)


def score(rr: dict, k: int, o: float) -> tuple[float, float]:
    ref = [a[0] - o for a in rr["ref"]]
    cand = [a[0] - o for a in rr["cand"]]
    nb = len(rr["harness_ref"])
    per = len(ref) // nb
    block_of = [i // per for i in range(len(ref))]
    st = stats.paired_totals(ref, cand, rr["harness_ref"], rr["harness_cand"], k, block_of, robust=True)
    return st.score, st.estimate


def spread(xs):
    return max(xs) / min(xs) - 1 if xs and min(xs) > 0 else float("nan")


keys = {0.0: {"rep": [], "agree": [], "over": []}, O_S: {"rep": [], "agree": [], "over": []}}
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        reps = [x for x in r["repeats"] if x.get("rounds_raw") and x["success"]]
        if not reps or not r.get("long", {}).get("rounds_raw"):
            continue
        cols = []
        for o in (0.0, O_S):
            lows = [score(x["rounds_raw"], x["k"], o)[0] for x in reps]
            long_est = score(r["long"]["rounds_raw"], r["long"]["k"], o)[1]
            med = statistics.median(lows)
            keys[o]["rep"].append(spread(lows))
            keys[o]["agree"].append(abs(med / long_est - 1))
            keys[o]["over"].append(max(v / long_est - 1 for v in lows))
            cols.append(f"{spread(lows):6.3f} {med:7.3f} (long {long_est:7.3f})")
        ks = [x["k"] for x in reps]
        print(f"{r['task'].split('/')[-1][:30]:30s} as recorded {cols[0]}   O off {cols[1]}   k {ks}")
for o, d in keys.items():
    n = len(d["rep"])
    print(f"O = {o * 1e3:.3f} ms: tasks {n}, repeatability_within_2pct {sum(x <= 0.02 for x in d['rep']) / n:.3f}, "
          f"median spread {statistics.median(d['rep']):.3f}, worst {max(d['rep']):.3f}, "
          f"agreement_within_3pct {sum(x <= 0.03 for x in d['agree']) / n:.3f}, over_claim_worst {max(d['over']):.3f}")
