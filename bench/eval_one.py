#!/usr/bin/env python3
"""One evaluation of one evaluator_bench candidate, with its phases printed as they happen: a diagnostic for a
task that stalls or runs long (on the H100, 2026-11-26: the scaled GRU, ~20 ms a call, printed nothing in 575 s
of evaluator_bench).

    python bench/eval_one.py --index 32 --device cuda --clock held --max-wall-s 80 --stack-after 70

Prints each progress step with its time, then the result's score, flags, error and timing keys (JSON). With
``--stack-after S`` every thread's Python stack is dumped to stderr after S seconds if it is still running
(faulthandler), so a stall shows where it sits.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.evaluator_bench import apply_sets, candidates  # noqa: E402
from kernelrl.config.stages import EvalConfig  # noqa: E402
from kernelrl.evaluation import evaluate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=int, required=True, help="Position in evaluator_bench's candidate list.")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--clock", default=None, choices=("host", "device", "held"))
    ap.add_argument("--budget-s", type=float, default=None)
    ap.add_argument("--max-wall-s", type=float, default=None, help="EvalConfig.max_wall_s (the absolute cap).")
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="EvalConfig.cuda_graphs = True (the default since version 9).")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="Any public EvalConfig knob (repeatable), e.g. --set target_ci=0.")
    ap.add_argument("--drains", action="store_true", help="Also print the holder's drains summarised by kind, "
                    "side and the phase before (timing.rounds_raw['drains']).")
    ap.add_argument("--repeat", type=int, default=1, help="Evaluate this many times in turn (fresh workers each).")
    ap.add_argument("--stack-after", type=float, default=0.0, help="Dump every thread's stack after this long.")
    a = ap.parse_args()
    task, seed = candidates(a.device)[a.index]
    over = {k: v for k, v in (("clock", a.clock), ("budget_s", a.budget_s), ("max_wall_s", a.max_wall_s))
            if v is not None}
    if a.cuda_graphs:
        over["cuda_graphs"] = True
    cfg = apply_sets(dataclasses.replace(EvalConfig(device=a.device), **over), a.set)
    print(f"{task.key} / {seed.name}: {over} {a.set}", flush=True)
    t0 = time.monotonic()
    last = [""]

    def progress(frac: float, phase: str) -> None:
        if phase != last[0]:
            last[0] = phase
            print(f"  {time.monotonic() - t0:7.2f} s  {phase} ({frac:.2f})", flush=True)

    for rep in range(a.repeat):
        t0 = time.monotonic()
        if a.stack_after > 0:  # armed per repeat: a stall in any of them dumps its stacks
            faulthandler.dump_traceback_later(a.stack_after, exit=False)
        r = evaluate(task, seed.source, cfg, progress=progress, keep_rounds=True)
        faulthandler.cancel_dump_traceback_later()
        timing = {k: v for k, v in (r.timing or {}).items() if k != "rounds_raw"}
        print(json.dumps({"repeat": rep, "wall_s": round(time.monotonic() - t0, 2), "speedup": r.speedup,
                          "estimate": timing.get("estimate"), "ci": [timing.get("ci_low"), timing.get("ci_high")],
                          "k": timing.get("calls_per_round"), "blocks": timing.get("blocks"),
                          "graphs": timing.get("graphs"), "flags": r.flags, "error": r.error,
                          "timing": timing}, default=str)[:6000], flush=True)
        if a.drains:
            raw = (r.timing or {}).get("rounds_raw") or {}
            print(json.dumps({"repeat": rep, "drains": drain_summary(raw), "holds_us": raw.get("holds")}),
                  flush=True)


def drain_summary(raw: dict) -> dict:
    """The holder's drains (us) grouped by (kind, before whose phase, after which phase): n, median and 90th
    percentile of the wait and of its first probe, and the share of waits that took more than one probe."""
    groups: dict[str, list] = {}
    for kind, side, after, waited, first, probes in raw.get("drains") or []:
        groups.setdefault(f"{kind}<{side} after {after}", []).append((waited, first, probes))
    out = {}
    for key, rows in sorted(groups.items()):
        w = sorted(r[0] for r in rows)
        f = sorted(r[1] for r in rows)
        out[key] = {"n": len(rows), "wait_med": w[len(w) // 2], "wait_p90": w[math.ceil(0.9 * (len(w) - 1))],
                    "first_med": f[len(f) // 2], "multi": round(sum(r[2] > 1 for r in rows) / len(rows), 3)}
    return out


if __name__ == "__main__":
    main()
