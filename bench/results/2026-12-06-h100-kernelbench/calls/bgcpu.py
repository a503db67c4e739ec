"""Does a process that just ran torch.compile burn CPU in background threads while its main thread sleeps?

Why: the held clock charges a candidate's per-process CPU time in its timed spans beyond the reference's
(`host-bound`); the re-verification times within about a second of its compile (2 correctness sets, not 20).
Ninth session (2026-12-07), on the 2-core CPU machine, torch 2.13.0 CPU: 8.54 ms of process CPU in the first second
after the compile, 0.12 and 0.13 ms in later seconds; threads MainThread, tqdm_monitor, ThreadPoolExecutor-1_0;
gc.collect 283 ms over 462k objects.

    .venv/bin/python bench/results/2026-12-06-h100-kernelbench/calls/bgcpu.py
"""
import gc
import threading
import time

import torch


def cpu() -> float:
    return time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)


class M(torch.nn.Module):
    def forward(self, a, p, n):
        return torch.nn.functional.triplet_margin_loss(a, p, n, margin=1.0)


m = torch.compile(M())
x = [torch.randn(128, 4096) for _ in range(3)]
t = time.time()
m(*x)
print("compile+first call", round(time.time() - t, 2), "s; threads", [th.name for th in threading.enumerate()])
for label, rest in (("right after", 1), ("after 2 s more", 9), ("after 10 s more", 0)):
    c0 = cpu()
    time.sleep(1.0)
    print(label, ": process CPU while main sleeps 1 s:", round((cpu() - c0) * 1e3, 2), "ms")
    time.sleep(rest)
t = time.perf_counter()
gc.collect()
print("gc.collect", round((time.perf_counter() - t) * 1e3, 1), "ms; objects", len(gc.get_objects()))
