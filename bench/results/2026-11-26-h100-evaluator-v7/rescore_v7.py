"""Re-score the held clock's recorded spans (no device time): per evaluation, the reported score, and the lower bound
of paired_totals(robust=True) on the recorded GPU times of the spans and harness phases (rounds_raw; the held checks'
aggregate charges are not in them, so the re-scores leave those out) with the wild blocks left in (the code of call
6) and left out (stats._without_wild, after call 6). Then each task's spread (max/min - 1) of the three repeats.

    cd bench/results/2026-11-26-h100-evaluator-v7 && python rescore_v7.py call5/bench_rows.jsonl call6/bench/rows.jsonl
"""
import json
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from kernelrl.evaluation import stats  # noqa: E402


def score(rr: dict, k: int, wild_out: bool) -> float:
    ref = [a[0] for a in rr["ref"]]
    cand = [a[0] for a in rr["cand"]]
    nb = len(rr["harness_ref"])
    per = len(ref) // nb
    block_of = [i // per for i in range(len(ref))]
    with mock.patch.object(stats, "_without_wild", stats._without_wild if wild_out else (lambda xs: xs)):
        return stats.paired_totals(ref, cand, rr["harness_ref"], rr["harness_cand"], k, block_of, robust=True).score


def spread(xs):
    return max(xs) / min(xs) - 1 if xs and min(xs) > 0 else float("nan")


for path in sys.argv[1:]:
    print(f"== {path}")
    for line in open(path):
        r = json.loads(line)
        reps = [x for x in r["repeats"] if x.get("rounds_raw") and x["success"]]
        if not reps:
            continue
        rep = [x["score_raw"] for x in reps]
        kept = [score(x["rounds_raw"], x["k"], False) for x in reps]
        out = [score(x["rounds_raw"], x["k"], True) for x in reps]
        print(f"{r['task'].split('/')[-1]:26s} reported {spread(rep):6.3f} {[round(v, 3) for v in rep]}  "
              f"wild kept {spread(kept):6.3f} {[round(v, 3) for v in kept]}  "
              f"wild out {spread(out):6.3f} {[round(v, 3) for v in out]}")
