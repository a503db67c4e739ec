"""Does where an input set lies in GPU memory move a memory-bound kernel's time? (issue 32 item 3)

On an H100 at evaluator version 23 two KernelBench level-1 self-pairs on 4-8 GiB tensors, 34_InstanceNorm and
33_BatchNorm (at 22), scored 0.976 and 1.023 with intervals of +-0.1%: the same kernels in two processes, about 2%
apart, in opposite directions (bench/results/2026-12-06-h100-kernelbench). If the place of a set in memory alone
moves a kernel's time that much, a paired score inherits it from wherever each worker's allocator put its sets (the
same places block after block, and a captured graph's static inputs for the whole evaluation).

    python bench/placement_probe.py kb/level1/34_InstanceNorm.py [TASK.py ...] [--buffers 4] [--rounds 20] [--graph]

One process, one model per task: up to ``--buffers`` copies of one input set (the same values), each behind a pad of
a different size so they start at different places, timed in turn, each round in a random order, with CUDA events
around one eager call after an L2 flush (``--graph``: each copy a CUDA graph's static input, replayed). Prints per
copy its median ms and its ratio to the first copy's median, and the first copy against itself (its even rounds over
its odd ones): the spread of the ratios beyond that control is what placement alone can do to a paired score.
A probe of the GPU, not of the evaluator; it trusts the task's code (ours: KernelBench references).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import sys

import torch

FLUSH_BYTES = 256 << 20  # more than the H100's and H200's 50-60 MiB L2: every call starts from HBM, as timed spans do


def load(path: str):
    spec = importlib.util.spec_from_file_location("probe_task", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def timed(fn, flush: torch.Tensor) -> float:
    """Milliseconds of one call on CUDA events, L2 flushed and the device idle before it."""
    flush.zero_()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b)


def probe(path: str, buffers: int, rounds: int, graph: bool, seed: int) -> dict:
    mod = load(path)
    torch.manual_seed(seed)
    with torch.device("cuda"):  # drawn on the GPU: KernelBench's inputs are gigabytes
        model = mod.Model(*mod.get_init_inputs()).eval()
        base = mod.get_inputs()
    base = [x.cuda() if torch.is_tensor(x) else x for x in base]
    in_bytes = sum(x.numel() * x.element_size() for x in base if torch.is_tensor(x))
    with torch.no_grad():
        out = model(*base)
    out_bytes = sum(o.numel() * o.element_size() for o in (out if isinstance(out, (list, tuple)) else [out]))
    del out
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    # each copy: its inputs, its pad, and (graphs) its static outputs and the forward's pool; a quarter spare
    per = in_bytes + (2 * out_bytes if graph else 0) + (64 << 20) * buffers
    free = torch.cuda.mem_get_info()[0] - 2 * out_bytes - FLUSH_BYTES
    n = max(1, min(buffers, int(0.75 * free) // max(per, 1)))
    copies, pads, fns = [], [], []
    rng = random.Random(seed)
    for i in range(n):
        pads.append(torch.empty((i * 37 + rng.randrange(64)) << 20, dtype=torch.uint8, device="cuda"))
        c = [x.clone() if torch.is_tensor(x) else x for x in base]
        copies.append(c)
        if graph:
            with torch.no_grad():
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    model(*c)  # warm-up off the capture stream, as torch's docs ask
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    static = model(*c)
            fns.append((lambda g=g: g.replay(), static))
        else:
            fns.append((lambda c=c: model(*c), None))
    del base
    times: list[list[float]] = [[] for _ in range(n)]
    with torch.no_grad():
        for fn, _ in fns:  # warm-up: each copy twice
            timed(fn, flush)
            timed(fn, flush)
        for _ in range(rounds):
            order = list(range(n))
            rng.shuffle(order)
            for i in order:
                times[i].append(timed(fns[i][0], flush))
    med = [statistics.median(t) for t in times]
    self_ratio = statistics.median(times[0][0::2]) / statistics.median(times[0][1::2])
    return {"task": path.rsplit("/", 1)[-1], "graph": graph, "copies": n, "rounds": rounds,
            "in_gib": round(in_bytes / 2**30, 2), "out_gib": round(out_bytes / 2**30, 2),
            "median_ms": [round(m, 4) for m in med], "ratio_to_first": [round(m / med[0], 4) for m in med],
            "first_even_over_odd": round(self_ratio, 4),
            "spread_of_copies": round(max(med) / min(med) - 1, 4),
            "addresses_mib": [c[0].data_ptr() >> 20 for c in copies if c and torch.is_tensor(c[0])]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tasks", nargs="+", help="KernelBench-format task files")
    ap.add_argument("--buffers", type=int, default=4, help="copies of the input set (fewer where memory is short)")
    ap.add_argument("--rounds", type=int, default=20, help="calls per copy (one per round, rounds in random order)")
    ap.add_argument("--graph", action="store_true", help="also replay each copy from its own CUDA graph")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("placement_probe: needs a CUDA GPU")
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}), flush=True)
    for path in args.tasks:
        for graph in ([False, True] if args.graph else [False]):
            try:
                print(json.dumps(probe(path, args.buffers, args.rounds, graph, args.seed)), flush=True)
            except Exception as e:  # noqa: BLE001 - one task's failure (its memory) must not hide the others'
                print(json.dumps({"task": path, "graph": graph, "error": f"{type(e).__name__}: {e}"[:300]}), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
