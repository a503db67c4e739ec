"""A naive KernelBench-style timer, the baseline our evaluator is compared against in bench/evaluator_bench.py.

    python bench/naive_timer.py TASK.py CANDIDATE.py [--device cuda|cpu] [--trials 5] [--iters 100]

Everything in ONE process (reference, candidate, clock): both models built under the same seed, 5 correctness
trials on get_inputs() at atol = rtol = 1e-2, then warm-up and ``iters`` timed calls of each, timed with CUDA
events recorded on the current stream (time.perf_counter on CPU), speedup = median(ref) / median(candidate).
This is how KernelBench-style harnesses (and the paper's first timer) measure; it trusts the candidate's process
with the clock, so side streams, patched events or synchronize, caches and stale results fool it. Prints one
line ``NAIVE {json}`` with correct, speedup and the medians. Run each measurement in its own process: a
hostile candidate can take this one down.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def naive_timer(task_src: str, cand_src: str, device: str = "cuda", trials: int = 5, iters: int = 100) -> dict:
    import torch

    ns_t: dict = {"__name__": "naive_task"}
    exec(compile(task_src, "task.py", "exec"), ns_t)
    path = Path(tempfile.mkdtemp(prefix="naive-")) / "candidate.py"  # a real file, for Triton's @jit
    path.write_text(cand_src)
    ns_c: dict = {"__name__": "naive_candidate", "__file__": str(path)}
    exec(compile(cand_src, str(path), "exec"), ns_c)
    init = ns_t["get_init_inputs"]()
    torch.manual_seed(42)
    ref = ns_t["Model"](*init).to(device)
    torch.manual_seed(42)
    cand = ns_c["ModelNew"](*init).to(device)

    def inputs():
        return [x.to(device) if isinstance(x, torch.Tensor) else x for x in ns_t["get_inputs"]()]

    correct = True
    with torch.no_grad():
        for trial in range(trials):
            torch.manual_seed(1000 + trial)
            x = inputs()
            r, c = ref(*x), cand(*x)
            r = r if isinstance(r, (tuple, list)) else [r]
            c = c if isinstance(c, (tuple, list)) else [c]
            if len(r) != len(c) or any(a.shape != b.shape or not torch.allclose(a, b, atol=1e-2, rtol=1e-2)
                                       for a, b in zip(r, c)):
                correct = False
                break
        x = inputs()

        def timeit(m) -> float:
            for _ in range(5):
                m(*x)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            ts = []
            for _ in range(iters):
                if device.startswith("cuda"):
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    m(*x)
                    e.record()
                    e.synchronize()  # waits for this stream's event only
                    ts.append(s.elapsed_time(e))
                else:
                    t0 = time.perf_counter()
                    m(*x)
                    ts.append((time.perf_counter() - t0) * 1e3)
            return statistics.median(ts)

        tr, tc = timeit(ref), timeit(cand)
    return {"correct": correct, "speedup": round(tr / tc, 3) if correct and tc > 0 else 0.0,
            "ref_ms": round(tr, 5), "cand_ms": round(tc, 5)}


def run_in_subprocess(task_src: str, cand_src: str, device: str, timeout_s: float = 300) -> dict:
    """One naive measurement in a fresh process (a crashing or hanging candidate cannot take the caller down)."""
    import subprocess

    d = Path(tempfile.mkdtemp(prefix="naive-run-"))
    (d / "task.py").write_text(task_src)
    (d / "cand.py").write_text(cand_src)
    try:
        p = subprocess.run([sys.executable, __file__, str(d / "task.py"), str(d / "cand.py"), "--device", device],
                           capture_output=True, text=True, timeout=timeout_s, start_new_session=True)
        for line in p.stdout.splitlines():
            if line.startswith("NAIVE "):
                return json.loads(line[6:])
        return {"correct": False, "speedup": 0.0, "error": ((p.stderr or "") + (p.stdout or ""))[-300:]}
    except subprocess.TimeoutExpired:
        return {"correct": False, "speedup": 0.0, "error": f"timed out after {timeout_s:.0f} s"}
    except Exception as e:  # noqa: BLE001
        return {"correct": False, "speedup": 0.0, "error": str(e)[:300]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("task")
    ap.add_argument("candidate")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--iters", type=int, default=100)
    a = ap.parse_args()
    res = naive_timer(Path(a.task).read_text(), Path(a.candidate).read_text(), a.device, a.trials, a.iters)
    print("NAIVE " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
