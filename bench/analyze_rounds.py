"""Offline look at an evaluator benchmark's raw rounds (``timing.rounds_raw``, kept by bench/evaluator_bench.py):
how noisy each side's timed span is, whether the order inside a round matters, how large the harness excess is,
what other estimators would have said, and (evaluator version 4's host probe) whether the blocks' levels and
ratios move with the host's speed: correlations of log(reference span), log(ratio) with log(probe) over blocks.
Costs no device time.

    python bench/analyze_rounds.py bench/results/DATE-h100-evaluator/rows.jsonl
"""

from __future__ import annotations

import json
import math
import statistics
import sys


def rel_mad(xs):
    m = statistics.median(xs)
    return statistics.median(abs(x - m) for x in xs) / m if m else float("nan")


def pearson(xs, ys):
    if len(xs) < 3:
        return float("nan")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy) if sx and sy else float("nan")


def probe_line(raw) -> str:
    """Per block: the reference's level and the pair ratio against the host probe taken before the block."""
    probes = raw.get("host_probe") or []
    nb = len(raw.get("harness_ref") or [])
    if not probes or nb == 0 or len(probes) != nb:
        return ""
    b = len(raw["ref"]) // nb
    lvl, rat = [], []
    for i in range(nb):
        gr = [g for g, _ in raw["ref"][i * b:(i + 1) * b]]
        gc = [g for g, _ in raw["cand"][i * b:(i + 1) * b]]
        lvl.append(math.log(statistics.median(gr)))
        rat.append(statistics.fmean(math.log(r / c) for r, c in zip(gr, gc)))
    out = []
    for key in ("py_us", "launch_us"):
        v = [p.get(key) for p in probes]
        if all(v):
            lv = [math.log(x) for x in v]
            out.append(f"{key}: spread={max(v) / min(v) - 1:.3f} corr(level)={pearson(lv, lvl):+.2f} "
                       f"corr(ratio)={pearson(lv, rat):+.2f}")
    return "  probe " + " ".join(out) if out else ""


def main() -> None:
    for line in open(sys.argv[1]):
        row = json.loads(line)
        for i, rep in enumerate(row.get("repeats", []) + ([row["long"]] if row.get("long") else [])):
            raw = rep.get("rounds_raw")
            if not raw:
                continue
            gr = [g for g, _ in raw["ref"]]
            gc = [g for g, _ in raw["cand"]]
            hr = [h for _, h in raw["ref"]]
            hc = [h for _, h in raw["cand"]]
            ratios = [a / b for a, b in zip(gr, gc)]
            first = raw.get("ref_first") or []
            rf = [r for r, f in zip(ratios, first) if f]
            cf = [r for r, f in zip(ratios, first) if not f]
            tag = "long" if i == len(row["repeats"]) else f"r{i}"
            print(f"{row['task'][-30:]:30s} {tag:4s} n={len(ratios):4d} k={rep.get('k')} "
                  f"go_ref={statistics.median(gr) * 1e3:8.3f}ms mad={rel_mad(gr):.3f} "
                  f"go_cand={statistics.median(gc) * 1e3:8.3f}ms mad={rel_mad(gc):.3f} "
                  f"harn_ref={statistics.median(hr) * 1e3:7.2f} harn_cand={statistics.median(hc) * 1e3:7.2f} "
                  f"med_ratio={statistics.median(ratios):.4f} "
                  f"ratio_of_med={statistics.median(gr) / statistics.median(gc):.4f} "
                  f"ref_first={statistics.median(rf) if rf else 0:.4f} "
                  f"cand_first={statistics.median(cf) if cf else 0:.4f} "
                  f"score={rep.get('score_raw')}" + probe_line(raw))


if __name__ == "__main__":
    main()
