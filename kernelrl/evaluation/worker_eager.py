"""The eager estimate inside a worker (``cmd_eager``; the parent's side is kernelrl/evaluation/eager.py): eager
forward calls on one fixed input set, each timed the way KernelBench times a call. Report-only, never rewarded.

**The numbers are the worker's own.** In the candidate's worker they come from a process that runs candidate code,
which can patch this module, the clocks and torch itself: a candidate can forge its own eager time. That is
acceptable here and only here, because nothing rewards it (the score comes from the trusted clocks of
timing.py); the parent only checks the reply's shape and range. Runs inside the worker process
(kernelrl/evaluation/worker.py), after the timed blocks and the verdict."""

from __future__ import annotations

import time

import torch

from kernelrl.evaluation.worker_inputs import draw_inputs, inputs_module
from kernelrl.evaluation.worker_state import STATE, device

# Bound before any candidate code runs (this module is imported with worker.py): an honest candidate that replaces
# one of these for its own reasons does not change how its calls are timed. A hostile one can still patch this
# module (see the docstring).
_perf = time.perf_counter
_cuda_sync = getattr(torch._C, "_cuda_synchronize", None) or torch.cuda.synchronize
_cuda_event = torch.cuda.Event


def cmd_eager(h, _tensors):
    """Up to ``n`` eager forward calls on one input set (drawn here with the task's get_inputs from ``seed``, the
    same set in both workers, kept for the next ``eager`` request of the same seed), each timed alone, KernelBench's
    way: on CUDA the device synchronised, a CUDA event recorded, the call, an event recorded, synchronised, the
    events' elapsed time (host dispatch included: the GPU waits for it between the events); on CPU
    ``time.perf_counter`` around the call. ``warmup`` untimed calls first. Stops after the call that passes
    ``budget_s`` of this request (at least one call). Replies the per-call milliseconds. The last timed block's
    staged sets and outputs are dropped first: this runs after the verdict, and nothing reads them any more."""
    model = STATE["model"]
    dev = device()
    STATE["staged"], STATE["round_outs"] = [], []
    seed = int(h["seed"])
    if STATE.get("eager_seed") != seed:
        STATE["eager_inputs"] = draw_inputs(inputs_module(), seed, "normal", dev)
        STATE["eager_seed"] = seed
    inputs = STATE["eager_inputs"]
    n, warmup, budget_s = max(1, int(h["n"])), max(0, int(h.get("warmup") or 0)), float(h["budget_s"])
    on_gpu = dev.type == "cuda"
    ms: list[float] = []
    t_start = _perf()
    with torch.no_grad():
        for _ in range(warmup):
            model(*inputs)
            if on_gpu:
                _cuda_sync()
            if _perf() - t_start > budget_s:
                break
        while len(ms) < n:
            if on_gpu:
                _cuda_sync()
                a, b = _cuda_event(enable_timing=True), _cuda_event(enable_timing=True)
                a.record()
                model(*inputs)
                b.record()
                _cuda_sync()
                ms.append(a.elapsed_time(b))
            else:
                t0 = _perf()
                model(*inputs)
                ms.append((_perf() - t0) * 1e3)
            if _perf() - t_start > budget_s:
                break
    return {"ok": True, "ms": ms}, []
