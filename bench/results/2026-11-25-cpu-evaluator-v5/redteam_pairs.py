"""Honest softmax (2 s) beside red-team candidates (the red team's 0.6 s config), N times, CPU.
Usage (repository root): python bench/results/2026-11-25-cpu-evaluator-v5/redteam_pairs.py N NAME [NAME ...]"""
import dataclasses
import sys

from kernelrl.evaluation import evaluate
from kernelrl.tasks import get_task

sys.path.insert(0, "tests/redteam")
from test_redteam_cpu import CFG, HERE  # noqa: E402

KEYS = ["estimate", "ci_low", "cand_span_ms", "harness_charge_ms", "harness_excess_ms", "harness_tolerance_ms",
        "rounds"]
task = get_task("02_Softmax")
for _ in range(int(sys.argv[1])):
    h = evaluate(task, (HERE / "honest.py").read_text(), dataclasses.replace(CFG, budget_s=2.0))
    out = [f"honest {max(h.speedup, h.timing.get('estimate') or 0):.2f} {h.flags}"]
    for name in sys.argv[2:]:
        p = evaluate(task, (HERE / f"{name}.py").read_text(), CFG)
        out.append(f"{name} {p.speedup} {p.flags} " + str({k: p.timing.get(k) for k in KEYS}))
    print(" | ".join(out), flush=True)
