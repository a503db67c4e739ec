"""Does where an input set lies in GPU memory move a memory-bound kernel's time? (issue 32 item 3)

On an H100 at evaluator version 23 two KernelBench level-1 self-pairs on 4-8 GiB tensors, 34_InstanceNorm and
33_BatchNorm (at 22), scored 0.976 and 1.023 with intervals of +-0.1%: the same kernels in two processes, about 2%
apart, in opposite directions (bench/results/2026-12-06-h100-kernelbench). If the place of a set in memory alone
moves a kernel's time that much, a paired score inherits it from wherever each worker's allocator put its sets (the
same places block after block, and a captured graph's static inputs for the whole evaluation).

    python bench/placement_probe.py kb/level1/34_InstanceNorm.py [TASK.py ...] [--buffers 4] [--rounds 20] [--graph]
        [--shuffle-capture]

One process, one model per task, in training mode as the evaluator builds it (``--eval-mode``: eval; BatchNorm is a
different kernel there): up to ``--buffers`` copies of one input set (the same values), each its own allocation
(a large tensor gets its own segment from the caching allocator), timed round by round in a random order, with CUDA
events around one eager call after an L2 flush (``--graph``: each copy a CUDA graph's static input, replayed; then
each graph's outputs are its own too, where in eager calls every copy's output reuses one cached block). Prints per
copy its median ms and, from the rounds (each times every copy), the median of copy i's time over copy 0's in the
same round with its quartiles, and each copy's even rounds over its odd ones (the same copy against itself): a
copy whose paired ratio sits outside the others' even/odd spread is placement at work. The addresses printed are
virtual; where the data sits in HBM is not visible from here. With ``--shuffle-capture`` the graphs are captured in
a random order (``capture_rank``), the copies still allocated in order: a slow copy that follows its capture rank,
not its allocation, is the capture at work, not the place. A probe of the GPU, not of the evaluator; it trusts
the task's code (ours: KernelBench references).
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


def probe(path: str, buffers: int, rounds: int, graph: bool, seed: int, train: bool = True,
          shuffle_capture: bool = False) -> dict:
    if rounds < 2:
        raise ValueError("rounds: at least 2 (even and odd rounds are compared)")
    mod = load(path)
    torch.manual_seed(seed)
    with torch.device("cuda"):  # drawn on the GPU: KernelBench's inputs are gigabytes
        model = mod.Model(*mod.get_init_inputs()).train(train)  # the evaluator's default: EvalConfig.train_mode
        base = mod.get_inputs()
    base = [x.cuda() if torch.is_tensor(x) else x for x in base]
    in_bytes = sum(x.numel() * x.element_size() for x in base if torch.is_tensor(x))
    with torch.no_grad():
        out = model(*base)
    out_bytes = sum(o.numel() * o.element_size() for o in (out if isinstance(out, (list, tuple)) else [out]))
    del out
    torch.cuda.empty_cache()  # the first call's output and temporaries back to the driver: mem_get_info counts them
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    # each copy: its inputs and (graphs) its static outputs; eager calls: one output at a time; a quarter spare for
    # the forward's temporaries
    per = in_bytes + (out_bytes if graph else 0)
    free = torch.cuda.mem_get_info()[0] - (0 if graph else out_bytes)
    n = max(1, min(buffers, int(0.75 * free) // max(per, 1)))
    copies: list = [[x.clone() if torch.is_tensor(x) else x for x in base] for _ in range(n)]  # allocation order
    rng = random.Random(seed)
    # the order the copies' graphs are captured in: allocation order, or shuffled (--shuffle-capture), so that the
    # first allocation and the first capture are told apart (H100 2026-12-07: 33_BatchNorm's copy 0, first on both
    # counts, replayed 4.7% slower than copies 1-3)
    capture = list(range(n))
    if graph and shuffle_capture:
        rng.shuffle(capture)
    fns: list = [None] * n
    for i in capture:
        c = copies[i]
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
            fns[i] = (lambda g=g: g.replay(), static)
        else:
            fns[i] = (lambda c=c: model(*c), None)
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
    paired = []  # copy i over copy 0, round by round: median and quartiles
    for t in times:
        q = statistics.quantiles([a / b for a, b in zip(t, times[0])], n=4)  # rounds >= 2
        paired.append([round(q[1], 4), round(q[0], 4), round(q[2], 4)])
    even_odd = [round(statistics.median(t[0::2]) / statistics.median(t[1::2]), 4) for t in times]
    res = {"task": path.rsplit("/", 1)[-1], "graph": graph, "train": train, "copies": n, "rounds": rounds,
           "in_gib": round(in_bytes / 2**30, 2), "out_gib": round(out_bytes / 2**30, 2),
           "median_ms": [round(m, 4) for m in med], "paired_to_first": paired, "even_over_odd": even_odd,
           "addresses_mib": [c[0].data_ptr() >> 20 for c in copies if c and torch.is_tensor(c[0])],
           "capture_rank": [capture.index(i) for i in range(n)] if graph else None}
    if n < 2:
        res["warning"] = "one copy only (memory): nothing to compare"
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tasks", nargs="+", help="KernelBench-format task files")
    ap.add_argument("--buffers", type=int, default=4, help="copies of the input set (fewer where memory is short)")
    ap.add_argument("--rounds", type=int, default=20, help="calls per copy (one per round, rounds in random order)")
    ap.add_argument("--graph", action="store_true", help="also replay each copy from its own CUDA graph")
    ap.add_argument("--shuffle-capture", action="store_true", help="capture the copies' graphs in a random order "
                    "(capture_rank says which came first), not in allocation order")
    ap.add_argument("--eval-mode", action="store_true", help="the model in eval mode (the evaluator's default is "
                    "training mode: EvalConfig.train_mode)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("placement_probe: needs a CUDA GPU")
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}), flush=True)
    for path in args.tasks:
        for graph in ([False, True] if args.graph else [False]):
            try:
                print(json.dumps(probe(path, args.buffers, args.rounds, graph, args.seed, not args.eval_mode,
                                       args.shuffle_capture)),
                      flush=True)
            except Exception as e:  # noqa: BLE001 - one task's failure (its memory) must not hide the others'
                print(json.dumps({"task": path, "graph": graph, "error": f"{type(e).__name__}: {e}"[:300]}), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
