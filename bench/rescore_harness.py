"""Re-score kept evaluations (bench/results/**/rows.jsonl, their timing.rounds_raw) under other harness-charge
settings, offline: how honest candidates' scores move with EvalConfig.harness_allowance, and how close they come
to the work-outside-timing rule (median harness excess against their own span). No device needed.

Usage (repository root):
    python bench/rescore_harness.py                       # every rows.jsonl under bench/results
    python bench/rescore_harness.py --caps 0.333,0.2,0.1 bench/results/2026-11-25-h100-evaluator-v3
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from kernelrl.evaluation.stats import paired_stats


def _repeats(path: Path):
    """(row, repeat, its kept rounds, its clock) of every evaluation in a rows.jsonl with kept rounds. The clock:
    the repeat's own ``clock`` (bench rows since the device clock), else the folder's meta.json settings."""
    meta = path.parent / "meta.json"
    settings = (json.loads(meta.read_text()).get("settings") or {}) if meta.exists() else {}
    folder_clock = settings.get("clock", "host")
    for line in path.read_text().splitlines():
        row = json.loads(line)
        for rep in row.get("repeats", []) + [row.get("long") or {}]:
            raw = rep.get("rounds_raw") or {}
            if raw.get("harness_ref") and raw.get("harness_cand"):
                yield row, rep, raw, rep.get("clock") or folder_clock


def kept_rounds(rep: dict, raw: dict, clock: str) -> tuple[list[float], list[float], list[int], int, float]:
    """(reference spans, candidate spans, block of each pair, k, overhead) of one kept evaluation, as the evaluator
    scored it: the parent clock's spans less the empty span's overhead; the device clock's (EvalConfig.clock)
    spans are device times, from which the evaluator subtracts nothing."""
    rg = [c[0] for c in raw["ref"]]
    cg = [c[0] for c in raw["cand"]]
    n = min(len(rg), len(cg))
    per = max(1, n // len(raw["harness_ref"]))
    overhead = 0.0 if clock == "device" else (rep.get("overhead_ms") or 0.0) / 1e3
    return rg[:n], cg[:n], [i // per for i in range(n)], rep.get("k") or 1, overhead


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="*", default=["bench/results"], help="folders searched for rows.jsonl")
    # 1/3 was the allowance before evaluator version 5; 0.2 is the default since.
    ap.add_argument("--caps", default="0.3333,0.2,0.1,0.05", help="harness_allowance values to compare")
    args = ap.parse_args(argv)
    caps = [float(c) for c in args.caps.split(",")]
    rows = []
    for root in args.roots:
        for path in sorted(Path(root).rglob("rows.jsonl")):
            for row, rep, raw, clock in _repeats(path):
                rg, cg, block_of, k, ov = kept_rounds(rep, raw, clock)
                sts = [paired_stats(rg, cg, raw["harness_ref"], raw["harness_cand"], k, ov, block_of, span_cap=c)
                       for c in caps]
                base = sts[0]
                rows.append({"where": str(path.parent), "task": row.get("task"), "seed": row.get("seed"),
                             "clock": clock,
                             "moved_share": base.excess_per_call / base.cand_span_per_call
                             if base.cand_span_per_call > 0 else 0.0,
                             "flagged": base.work_moved_out,
                             "lower": [s.ci_low / base.ci_low - 1 if base.ci_low > 0 else 0.0 for s in sts],
                             "estimate": [s.estimate / base.estimate - 1 if base.estimate > 0 else 0.0 for s in sts]})
    if not rows:
        print("no kept rounds found")
        return 1
    print(f"{len(rows)} evaluations with kept rounds")
    for i, c in enumerate(caps):
        lo = [r["lower"][i] for r in rows]
        est = [r["estimate"][i] for r in rows]
        print(f"harness_allowance {c:.4f}: lower bound vs {caps[0]:.4f}: median {statistics.median(lo):+.4f} "
              f"worst {min(lo):+.4f}; estimate: median {statistics.median(est):+.4f} worst {min(est):+.4f}")
    for clock in sorted({r["clock"] for r in rows}):  # a device-clock span is a far shorter yardstick: apart
        these = [r for r in rows if r["clock"] == clock]
        worst = max(these, key=lambda r: r["moved_share"])
        print(f"{clock} clock, {len(these)} evaluations: largest median harness excess / own span: "
              f"{worst['moved_share']:.3f} ({worst['task']} {worst['seed']}, {worst['where']}); "
              f"flagged work-outside-timing: {sum(r['flagged'] for r in these)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
