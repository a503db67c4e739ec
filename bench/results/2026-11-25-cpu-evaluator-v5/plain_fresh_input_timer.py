"""A plain single-process timer for the Softmax task: 6 fresh inputs per block, per-call ms, one thread.
Usage: OMP_NUM_THREADS=1 taskset -c 1 python .../plain_fresh_input_timer.py (with the workers' MALLOC_* env)"""
import importlib.util
import statistics
import time

import torch

torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location("t", "kernelrl/tasks/builtin/level1/02_Softmax.py")
task = importlib.util.module_from_spec(spec)
spec.loader.exec_module(task)
ref = task.Model()


def block(f, k=6):
    xs = [torch.randn(1024, 2048) for _ in range(k)]
    outs = []
    t0 = time.perf_counter()
    with torch.no_grad():
        for x in xs:
            outs.append(f(x))
    return (time.perf_counter() - t0) / k


for f, name in ((ref, "ref"), (lambda x: torch.softmax(x, dim=1), "cand")):
    v = [block(f) for _ in range(30)]
    print(name, "ms/call median %.3f min %.3f" % (statistics.median(v) * 1e3, min(v) * 1e3))
