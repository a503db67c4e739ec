"""Red-team candidates evaluated two at a time (threads, as the soak's two service workers), budget 0.05 s, CPU;
prints each one's median harness excess against its span and the two noise guards (per-block tolerance, 3
standard errors of the median). Usage: python .../concurrent_pairs.py NAME,NAME REPEATS"""
import math
import statistics
import sys
import threading

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import evaluate
from kernelrl.tasks import get_task

sys.path.insert(0, "tests/redteam")
from test_redteam_cpu import HERE  # noqa: E402

CFG = EvalConfig(device="cpu", budget_s=0.05, correctness_trials=3, max_wall_s=90, min_timeout_s=4.0,
                 timeout_factor=50.0, spread_threshold=10.0, memory_limit_mb=4096, reverify=False, keep_rounds=True)
task = get_task("02_Softmax")
names = sys.argv[1].split(",")
results = {}


def run(name):
    results[name] = evaluate(task, (HERE / f"{name}.py").read_text(), CFG)


for _ in range(int(sys.argv[2])):
    threads = [threading.Thread(target=run, args=(n,)) for n in names]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for n in names:
        r = results[n]
        raw = r.timing.get("rounds_raw") or {}
        hr, hc = raw.get("harness_ref") or [], raw.get("harness_cand") or []
        if not hr:
            print(n, r.flags, r.error)
            continue
        k = r.timing.get("calls_per_round") or 1
        med = statistics.median(hr)
        mad = statistics.median(abs(x - med) for x in hr)
        tol = max(3 * math.sqrt(2) * 1.4826 * mad, 0.02 * med)
        se3 = max(3 * 1.2533 * math.sqrt(2) * 1.4826 * mad / math.sqrt(len(hr)), 0.02 * med)
        exc = statistics.median(c - h for c, h in zip(hc, hr))
        print(f"{n:26s} score={r.speedup:5.2f} {sorted(r.flags)} blocks={len(hr)} "
              f"span/call={r.timing.get('cand_span_ms'):.3f} excess/call={exc / k * 1e3:.3f} "
              f"tol/call={tol / k * 1e3:.3f} se3/call={se3 / k * 1e3:.3f} (ms)", flush=True)
