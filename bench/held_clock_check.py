"""One pair evaluated a few times on each clock, side by side, with the keys that say where each clock's time went:
the first thing to run on a GPU after a change to the held clock (EvalConfig.clock = "held").

    python bench/held_clock_check.py --task 02_Softmax --seed triton_online --clocks held,host --repeats 3
    python bench/held_clock_check.py --pairs 02_Softmax:triton_online,08_RMSNorm:triton_rmsnorm --clocks held

Prints one line per evaluation (score, interval, per-call times, flags, the held clock's hold, charges and round
trips) and a line per clock with the repeats' spread (max/min - 1 of the reported scores). On a failure the
error and the traceback tail are printed and the next evaluation runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelrl.config.stages import EvalConfig  # noqa: E402
from kernelrl.evaluation import evaluate  # noqa: E402
from kernelrl.tasks import get_task, load_seeds  # noqa: E402

KEYS = ("estimate", "ci_low", "ci_high", "ref_per_call_ms", "cand_per_call_ms", "calls_per_round", "blocks", "stop",
        "hold_ms", "held_work_ms_ref", "held_work_ms_cand", "outside_ms_ref", "outside_ms_cand", "host_cpu_ms_ref",
        "host_cpu_ms_cand", "stretch_charge_ms", "outside_charge_ms", "host_charge_ms", "harness_charges_ms",
        "ref_harness_ms", "cand_harness_ms", "harness_charge_ms", "ref_slowdown", "phases_s")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="02_Softmax")
    ap.add_argument("--seed", default="triton_online", help="a seed of the task (kernelrl/tasks/builtin/seeds)")
    ap.add_argument("--clocks", default="held,host")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=None)
    ap.add_argument("--out", default=None, help="append every result as a JSON line here")
    ap.add_argument("--pairs", default=None, help="TASK:SEED,TASK:SEED,... instead of --task/--seed")
    a = ap.parse_args()
    pairs = [p.split(":") for p in a.pairs.split(",")] if a.pairs else [(a.task, a.seed)]
    for name, seed in pairs:
        a.task, a.seed = name, seed
        check(a)
    return 0


def check(a) -> None:
    task = get_task(a.task)
    seeds = {s.name: s for s in load_seeds(task)}
    src = seeds[a.seed].source if a.seed in seeds else Path(a.seed).read_text()
    out = open(a.out, "a") if a.out else None
    for clock in a.clocks.split(","):
        cfg = dataclasses.replace(EvalConfig(device="cuda"), clock=clock, reverify=False)
        if a.budget_s:
            cfg = dataclasses.replace(cfg, budget_s=a.budget_s)
        scores = []
        for i in range(a.repeats):
            t0 = time.monotonic()
            r = evaluate(task, src, cfg)
            t = r.timing
            line = {k: t.get(k) for k in KEYS if k in t}
            wall = time.monotonic() - t0
            print(f"{a.task} {clock} #{i}: speedup={r.speedup} success={r.success} flags={r.flags} wall={wall:.1f}s "
                  f"{json.dumps(line)}", flush=True)
            if r.error:
                print(f"  error: {r.error[-1500:]}", flush=True)
            if out:
                out.write(json.dumps({"clock": clock, "task": a.task, "seed": a.seed, "speedup": r.speedup,
                                      "flags": r.flags, "error": r.error, "timing": t}) + "\n")
            if r.success and t.get("ci_low"):
                scores.append(float(t["ci_low"]))
        if scores:
            print(f"{a.task} {clock}: lower bounds {scores}, spread {max(scores) / min(scores) - 1:.4f}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
