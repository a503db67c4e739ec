"""Where the device comparison of large outputs spends its time (issue 32: KernelBench level 1's 6.4 GB outputs).

    python bench/compare_profile.py --device cuda --sizes-mib 64,1024,6144 --json $OUT/compare_profile.json

Why: on the H100 (c24-c27, bench/results/2026-12-06-h100-kernelbench) the reference worker's comparison of a
correctness set's outputs (worker_share.cmd_compare_kept -> compare.compare) took 2.0-3.0 s for the level-1
activations and norms, a quarter of a 10-15 s evaluation. Measured (c28, H100): that is twenty sets of 6.4 GB
at ~0.1 s each: compare's nine elementwise kernels per chunk (0.4-0.7 ms each on 64M elements), ~20 times
reading both outputs once; the fused pass takes ~0.05 s (the README's eighth-session section). This measures,
for one pair of equal-sized float32 outputs (equal within float32 rounding, as an honest candidate's):
- ``inproc``: compare.compare on two tensors of this process (the kernels and syncs alone);
- ``ipc``: the candidate's tensor made by a child process and mapped here through devshare (the path the
  evaluator takes: cuIpcOpenMemHandle), so a slow read of mapped memory shows apart;
- ``tight``: in-process again with the device filled until ``--tight-gib`` is free, as in a reference worker that
  holds its inputs, kept outputs and graphs (the allocator must then free cached blocks for each temporary);
- ``ops``: each operation of one chunk's loop (compare._compare_floats_chunked) timed alone;
- ``fused`` (beside inproc, ipc and tight): ``fused_compare``, one pass with no sync per chunk and compare's
  verdicts (a candidate to replace the device path if the profile says the chunk loop is the cost).
Each line says seconds (median of ``--reps``) and the allocator's device allocations and retries during it
(torch.cuda.memory_stats: ``num_device_alloc``, ``num_alloc_retries``). Nothing here is a score; the evaluator
does not import it. On a host without CUDA ``--device cpu`` runs the in-process parts (a smoke test)."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from functools import partial

import torch

from kernelrl.evaluation.compare import DEVICE_COMPARE_CHUNK, TOLERANCES, compare

# The child that owns the candidate's output for the ipc case: the same seeded values as the parent's reference,
# plus float32 noise an honest candidate's rounding could leave (relative 1e-7, far inside the 1e-3 tolerance).
CHILD = r"""
import json, sys, torch
from kernelrl.evaluation.devshare import export
n = int(sys.argv[1])
g = torch.Generator(device="cuda").manual_seed(0)
r = torch.rand(n, device="cuda", generator=g)
c = r * (1 + 1e-7 * torch.randn(n, device="cuda", generator=g))
del r
torch.cuda.synchronize()
print(json.dumps(export(c)), flush=True)
sys.stdin.readline()  # hold the memory until the parent has compared and unmapped
"""


def fused_compare(ref: list, cand: list, ref_structure, cand_structure):
    """A one-pass comparison with compare.compare's verdicts, measured beside it (not used by the evaluator): per
    chunk d = r - c, the float64 norms of r and d and the largest |d| - rtol |r|, all kept on the device (no sync
    per chunk). Both norms finite means every element of both outputs is finite (float64 sums of float32 squares
    cannot overflow; a non-finite c makes d non-finite). The tolerance holds for every element when that largest
    excess is at most half of atol x scale (a margin far above float32's rounding of rtol |r|); anything else
    (non-finite values, an excess near or past the bound, an integer output) is answered by compare.compare itself,
    so a failure's message is the same. So the verdict is compare's; only a clear pass is taken early."""
    if ref_structure != cand_structure or len(ref) != len(cand):
        return compare(ref, cand, ref_structure, cand_structure)
    for r, c in zip(ref, cand):
        if r.shape != c.shape or r.dtype != c.dtype or r.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            return compare(ref, cand, ref_structure, cand_structure)
        atol, rtol, rel_norm = TOLERANCES[r.dtype]
        r1, c1 = r.reshape(-1), c.reshape(-1)
        chunk = DEVICE_COMPARE_CHUNK if r.device.type == "cuda" else 1 << 20
        zero = torch.zeros((), dtype=torch.float64, device=r.device)
        ref_sq, diff_sq, excess = zero.clone(), zero.clone(), torch.full((), -math.inf, device=r.device)
        for s0 in range(0, r1.numel(), chunk):
            rf, cf = r1[s0:s0 + chunk].float(), c1[s0:s0 + chunk].float()
            d = rf - cf
            ref_sq += torch.linalg.vector_norm(rf, dtype=torch.float64).square()
            diff_sq += torch.linalg.vector_norm(d, dtype=torch.float64).square()
            excess = torch.maximum(excess, d.abs_().sub_(rf.abs().mul_(rtol)).max())  # rf may be r's own memory
        ref_sq_f, diff_sq_f, excess_f = (float(x) for x in torch.stack([ref_sq, diff_sq, excess.double()]).cpu())
        if not (math.isfinite(ref_sq_f) and math.isfinite(diff_sq_f)):
            return compare(ref, cand, ref_structure, cand_structure)
        m = r1.numel()
        denom = math.sqrt(ref_sq_f)
        scale = max(1.0, denom / math.sqrt(max(m, 1)))
        if excess_f > 0.5 * atol * scale:
            return compare(ref, cand, ref_structure, cand_structure)
        num = math.sqrt(diff_sq_f)
        if (denom > 0 and num / denom > rel_norm) or (denom == 0 and num > atol * math.sqrt(max(m, 1))):
            return compare(ref, cand, ref_structure, cand_structure)
    return None


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def alloc_stats(dev: torch.device) -> dict:
    if dev.type != "cuda":
        return {}
    m = torch.cuda.memory_stats(dev)
    return {"device_allocs": m.get("num_device_alloc", 0), "device_frees": m.get("num_device_free", 0),
            "alloc_retries": m.get("num_alloc_retries", 0)}


def timed(fn, dev: torch.device, reps: int) -> dict:
    """fn() ``reps`` times, each between device syncs: median and all seconds, allocator counts over all reps."""
    secs, before = [], alloc_stats(dev)
    out = None
    for _ in range(reps):
        sync(dev)
        t0 = time.perf_counter()
        out = fn()
        sync(dev)
        secs.append(time.perf_counter() - t0)
    after = alloc_stats(dev)
    return {"s": round(statistics.median(secs), 4), "all_s": [round(x, 4) for x in secs],
            "verdict": None if out is None else str(out)[:120],
            **{k: after[k] - before[k] for k in after}}


def pair(n: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device=dev).manual_seed(0)
    r = torch.rand(n, device=dev, generator=g)
    c = r * (1 + 1e-7 * torch.randn(n, device=dev, generator=g))
    return r, c


def ops(r: torch.Tensor, c: torch.Tensor, dev: torch.device, reps: int) -> dict:
    """One chunk's operations, as compare._compare_floats_chunked runs them, each timed alone."""
    k = min(r.numel(), DEVICE_COMPARE_CHUNK if dev.type == "cuda" else 1 << 20)
    rf, cf = r[:k], c[:k]
    atol, rtol, _ = TOLERANCES[torch.float32]
    fin = torch.isfinite(rf)
    diff = (rf - cf).abs_()
    steps = {
        "isfinite": lambda: torch.isfinite(rf),
        "equal(finite masks)": lambda: torch.equal(fin, torch.isfinite(cf)),
        "all(finite)": lambda: bool(fin.all()),
        "norm f64 (ref)": lambda: float(torch.linalg.vector_norm(rf, dtype=torch.float64)),
        "norm f32": lambda: float(torch.linalg.vector_norm(rf)),
        "sub+abs": lambda: (rf - cf).abs_(),
        "tolerance (abs,mul,add,gt)": lambda: diff > rf.abs().mul_(rtol).add_(atol),
        "bad.sum": lambda: int((diff > 1.0).sum()),
        "norm f64 (diff)": lambda: float(torch.linalg.vector_norm(diff, dtype=torch.float64)),
        "read both once (sum)": lambda: float(rf.sum() + cf.sum()),
    }
    return {"chunk_elems": k, **{name: timed(fn, dev, reps)["s"] for name, fn in steps.items()}}


def fill_until(dev: torch.device, free_gib: float) -> list:
    """Tensors allocated through torch's allocator until about ``free_gib`` of the device is free."""
    held = []
    while True:
        free, _ = torch.cuda.mem_get_info(dev)
        extra = free - int(free_gib * 1024**3)
        if extra < 64 * 1024**2:
            return held
        held.append(torch.empty(min(extra, 4 * 1024**3), dtype=torch.uint8, device=dev))


def ipc_case(n: int, r: torch.Tensor, dev: torch.device, reps: int) -> dict:
    from kernelrl.evaluation.devshare import Opened
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        desc = json.loads(child.stdout.readline())
        opened = Opened(dev)
        t0 = time.perf_counter()
        c = opened.view(desc)
        open_s = time.perf_counter() - t0
        res = timed(partial(compare, [r], [c], [1], [1]), dev, reps)
        res["fused"] = timed(partial(fused_compare, [r], [c], [1], [1]), dev, reps)
        del c
        t1 = time.perf_counter()
        opened.close()
        return res | {"open_s": round(open_s, 4), "close_s": round(time.perf_counter() - t1, 4)}
    finally:
        child.stdin.write("\n")
        child.stdin.close()
        child.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sizes-mib", default="64,1024,6144", help="Output sizes (MiB of float32 each side).")
    ap.add_argument("--reps", type=int, default=3, help="Repeats of each timing (the median is reported).")
    ap.add_argument("--tight-gib", type=float, default=2.0,
                    help="Free device memory left for the 'tight' case (a reference worker near full).")
    ap.add_argument("--json", default="", help="Also write every line to this file.")
    a = ap.parse_args(argv)
    dev = torch.device(a.device)
    lines: list[dict] = []

    def say(d: dict) -> None:
        lines.append(d)
        print(json.dumps(d), flush=True)

    say({"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "torch": torch.__version__,
         "chunk": DEVICE_COMPARE_CHUNK})
    for mib in (int(x) for x in a.sizes_mib.split(",") if x):
        n = mib * 1024**2 // 4
        r, c = pair(n, dev)
        say({"mib": mib, "case": "inproc", **timed(partial(compare, [r], [c], [1], [1]), dev, a.reps)})
        say({"mib": mib, "case": "inproc fused", **timed(partial(fused_compare, [r], [c], [1], [1]), dev, a.reps)})
        say({"mib": mib, "case": "ops", **ops(r, c, dev, a.reps)})
        if dev.type == "cuda":
            del c
            torch.cuda.empty_cache()
            say({"mib": mib, "case": "ipc", **ipc_case(n, r, dev, a.reps)})
            r, c = pair(n, dev)
            held = fill_until(dev, a.tight_gib)
            free_gib = round(torch.cuda.mem_get_info(dev)[0] / 1024**3, 2)
            try:
                say({"mib": mib, "case": "tight", "free_gib": free_gib,
                     **timed(partial(compare, [r], [c], [1], [1]), dev, a.reps)})
                say({"mib": mib, "case": "tight fused", "free_gib": free_gib,
                     **timed(partial(fused_compare, [r], [c], [1], [1]), dev, a.reps)})
            except torch.OutOfMemoryError as e:  # an answer too: the comparison needs more room than was left
                say({"mib": mib, "case": "tight", "free_gib": free_gib, "error": str(e)[:300]})
            del held
        del r, c
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(lines, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
