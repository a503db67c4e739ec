#!/usr/bin/env python3
"""Re-score the v9 benchmark's recorded GPU times with the harness-excess rule of the code that ran
(stats.paired_totals as committed at 7c5ab67) and with the wild-block drop added after it, to isolate that change.

    PYTHONPATH=. python bench/results/2026-11-26-h100-evaluator-v9/rescore_v9.py

Per evaluation: the raw held span times (rounds_raw, the span's fixed cost taken off), each side's harness time per
span (rounds_raw), the candidate's span charges (inferred from the reported cand_ms) and its held harness charges
(harness_charges_ms, per pair of phases, over B spans). The old rule must reproduce the reported lower bound.
No device time: arithmetic on recorded numbers."""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from kernelrl.evaluation import stats

HERE = Path(__file__).parent


def rescore(x: dict, wild: bool) -> tuple[float, float]:
    rr = x["rounds_raw"]
    o = x["span_overhead_ms"] / 1e3
    go_r = [g[0] - o for g in rr["ref"]]
    go_c = [g[0] - o for g in rr["cand"]]
    hr, hc = rr["harness_ref"], rr["harness_cand"]
    B = len(go_r) // len(hr)
    k = x["k"]
    c_go = max(0.0, (x["cand_ms"] - x["charge_ms"]) / 1e3 * k - statistics.median(go_c))
    c_h = sum(v for ph in x["held"]["harness_charges_ms"].values() for v in ph.values()) / 1e3 / B
    block_of = [i // B for i in range(len(go_r))]
    # wild_drop=False: the rule that ran (7c5ab67); True: the wild-block drop added after it
    st = stats.paired_totals(go_r, [c + c_go for c in go_c], hr, [h + c_h for h in hc], k, block_of,
                             robust=True, allowance=0.05, wild_drop=wild)
    return st.ci_low, st.estimate


def main() -> None:
    rows = [json.loads(line) for line in (HERE / "benchmark" / "rows.jsonl").read_text().splitlines()]
    out = []
    worst_repro = 0.0
    for d in rows:
        reps = d["repeats"]
        old = [rescore(x, False)[0] for x in reps]
        new = [rescore(x, True)[0] for x in reps]
        worst_repro = max(worst_repro, max(abs(a / x["score_raw"] - 1) for a, x in zip(old, reps)))
        long_est = rescore(d["long"], True)[1] if d.get("long") else None
        long_old = d["long"]["estimate"] if d.get("long") else None
        out.append((d["task"], old, new, long_old, long_est))
    def summary(idx, long_idx):
        devs = [max(r[idx]) / min(r[idx]) - 1 for r in out]
        agree = [abs(statistics.median(r[idx]) / r[long_idx] - 1) for r in out if r[long_idx]]
        over = [max(r[idx]) / r[long_idx] - 1 for r in out if r[long_idx]]
        return {"repeatability_within_2pct": round(sum(d <= 0.02 for d in devs) / len(devs), 3),
                "repeatability_worst": round(max(devs), 4), "median_spread": round(statistics.median(devs), 4),
                "agreement_within_3pct": round(sum(a <= 0.03 for a in agree) / len(agree), 3),
                "over_claim_worst": round(max(over), 4)}
    print(f"old rule reproduces the reported lower bounds within {worst_repro:.2e} (relative)")
    for t, old, new, lo, ln in out:
        print(f"{t:48s} old {' '.join(f'{v:.3f}' for v in old)}  new {' '.join(f'{v:.3f}' for v in new)}"
              f"  long {lo:.3f}/{ln:.3f}")
    print("as run (old rule):", json.dumps(summary(1, 3)))
    print("with the wild-block drop:", json.dumps(summary(2, 4)))


if __name__ == "__main__":
    sys.exit(main())
