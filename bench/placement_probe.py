#!/usr/bin/env python3
"""Does *where* a task's tensors sit in GPU memory move its time? A diagnostic for issue 13's last gap.

    python bench/placement_probe.py --pairs 09_Swish:*,02_Softmax:*,02_Gemm_Divide_Sum_Scale:* --groups 12 \
        --rounds 15 --out /tmp/placement.jsonl

Why: on the H100 (bench/results/2026-11-26-h100-evaluator-v7/held_ratios.txt) the held clock's GPU-work ratio of
one pair moved 0.4-5% between evaluations (fresh worker processes) while its interval within one evaluation was
~0.5%, with the SM clock steady at 1980 MHz throughout (smi.csv.gz of call 6) and, for Swish and RMSNorm, the same
k in every evaluation (101), so neither the clock nor k explains it. What differs between processes and stays
fixed within one is where the caching allocator put the staged inputs and outputs (each worker reuses its blocks,
so every timed block of one evaluation runs on the same memory).

What it does, in one trusted process (no sandbox: the built-in seeds only): builds the task's reference and one
honest seed (evaluator_bench's pick for the task, its builds from the evaluator's compile cache), allocates
``--groups`` placement groups, each holding k input sets drawn once (k calls of the reference take about
--target-ms, as the evaluator's spans do), every group in fresh allocations kept alive with a random-size spacer
before it (so the groups land on different pages). Then ``--rounds`` rounds: in each, every group in random
order, reference and candidate in random order, an L2 flush and a sync before each, and CUDA events around k calls
over the group's sets (the evaluator's span shape). Per group and side: the median over rounds. Printed per pair:

  within_pct   median over groups of the rounds' robust spread (1.4826 MAD / median): a span's own repeatability
  between_pct  max/min-1 of the groups' medians, per side, and of the groups' ratios (ref / cand)
  ratio_sd_pct robust sd of the groups' ratios over their median

If ``between`` is well above what ``within`` allows for a median of ``rounds`` values (~1.25 x within / sqrt
(rounds)), placement moves the time, and the evaluator should re-draw placement per block (so one evaluation
averages over placements) rather than time every block on the same memory. If not, look elsewhere (per-process
state: cuBLAS/cuDNN algorithm choice, the Triton autotuner's pick, context creation).
On a CPU it runs too (perf_counter instead of events; a smoke test of the script, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.evaluator_bench import pick_seed  # noqa: E402
from kernelrl.config.stages import EvalConfig  # noqa: E402
from kernelrl.evaluation.precompile import candidate_cache_dir  # noqa: E402
from kernelrl.evaluation.stats import robust_sd  # noqa: E402
from kernelrl.tasks import get_task  # noqa: E402
from kernelrl.tasks.seeds import load_seeds  # noqa: E402


def _load(source: str, name: str) -> dict:
    """Import ``source`` from a file (Triton's @jit reads its function's source from one)."""
    import importlib.util
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="placement-")) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)  # the built-in tasks and seeds only (trusted)
    return vars(mod)


def _to(xs, dev):
    return [x.to(dev) if torch.is_tensor(x) else x for x in xs]


def _capture(model, sets):
    """A CUDA graph of ``model`` over ``sets`` (one call each), warmed on a side stream first (torch's recipe)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x in sets[:2]:
            model(*x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for x in sets:
            model(*x)
    torch.cuda.synchronize()
    return g


def _replay(g, flush) -> float:
    flush.zero_()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / 1e3


def probe(task_key: str, seed_name: str, dev: torch.device, groups: int, rounds: int, target_ms: float,
          rng: random.Random, graphs: bool = False) -> dict:
    task = get_task(task_key)
    if seed_name == "*":  # the seed evaluator_bench times for this task
        seed = pick_seed(task, str(dev))
    else:
        seed = next((s for s in load_seeds(task) if s.name == seed_name), None)
    if seed is None:
        return {"task": task_key, "error": f"no seed {seed_name!r} (have {[s.name for s in load_seeds(task)]})"}
    # the evaluator's per-source compile cache: builds of a prebuild run (or a carried .ccache) are found there
    cache = candidate_cache_dir(seed.source, EvalConfig())
    os.environ["TORCH_EXTENSIONS_DIR"] = str(cache / "torch_extensions")
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
    ref_ns, cand_ns = _load(task.source, f"ref_{task.name}"), _load(seed.source, f"cand_{seed.name}")
    init = ref_ns["get_init_inputs"]()
    torch.manual_seed(0)
    ref = ref_ns["Model"](*init).to(dev)
    torch.manual_seed(0)
    cand = cand_ns["ModelNew"](*init).to(dev)
    cand.load_state_dict({k: v for k, v in ref.state_dict().items() if k in cand.state_dict()}, strict=False)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    flush = torch.empty(64 << 20 if cuda else 1, dtype=torch.uint8, device=dev)  # > the H100's 50 MB L2

    def span(model, sets) -> float:
        flush.zero_()
        sync()
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for x in sets:
                model(*x)
            b.record()
            b.synchronize()
            return a.elapsed_time(b) / 1e3
        t0 = time.perf_counter()
        for x in sets:
            model(*x)
        return time.perf_counter() - t0

    with torch.no_grad():
        one = _to(ref_ns["get_inputs"](), dev)
        for _ in range(3):  # warm-up: builds, autotuning, the allocator's first segments
            ref(*one)
            cand(*one)
        sync()
        per_call = min(span(ref, [one] * 4) for _ in range(3)) / 4
        k = max(1, min(256, round(target_ms / 1e3 / max(per_call, 1e-7))))
        placed, spacers = [], []
        for _ in range(groups):
            spacers.append(torch.empty(rng.randrange(1, 64) << 20, dtype=torch.uint8, device=dev))
            placed.append([_to(ref_ns["get_inputs"](), dev) for _ in range(k)])
        sync()
        replays = None
        if graphs and cuda:
            # --graphs: each group's k calls captured once per side and replayed: no host dispatch in the span
            # (an unheld span of 7-17 us kernels moved 1.4-3% with the host; v8 call 1), so a placement effect
            # of a fraction of a percent shows. The outputs live in each graph's own pool: placed per group too.
            try:
                replays = {side: [_capture(ref if side == "ref" else cand, sets) for sets in placed]
                           for side in ("ref", "cand")}
            except Exception as e:  # noqa: BLE001 - a model that cannot be captured: eager spans, said so
                replays = None
                graph_error = f"{type(e).__name__}: {e}"[:200]
        times: dict[str, list[list[float]]] = {"ref": [[] for _ in placed], "cand": [[] for _ in placed]}
        for _ in range(rounds):
            for g in rng.sample(range(groups), groups):
                for side in rng.sample(["ref", "cand"], 2):
                    if replays is not None:
                        times[side][g].append(_replay(replays[side][g], flush))
                    else:
                        times[side][g].append(span(ref if side == "ref" else cand, placed[g]))
    med = {side: [statistics.median(t) for t in times[side]] for side in times}
    ratios = [r / c for r, c in zip(med["ref"], med["cand"])]
    within = {side: statistics.median(robust_sd(t) / statistics.median(t) for t in times[side]) for side in times}
    pct = lambda x: round(100 * x, 3)  # noqa: E731
    extra = {"graphs": replays is not None}
    if graphs and replays is None and cuda:
        extra["graph_error"] = graph_error
    return {"task": task_key, "seed": seed.name, "device": str(dev), "k": k, "groups": groups, "rounds": rounds,
            **extra,
            "ref_ms": round(statistics.median(med["ref"]) / k * 1e3, 5),
            "cand_ms": round(statistics.median(med["cand"]) / k * 1e3, 5),
            "within_pct": {side: pct(v) for side, v in within.items()},
            "between_pct": {"ref": pct(max(med["ref"]) / min(med["ref"]) - 1),
                            "cand": pct(max(med["cand"]) / min(med["cand"]) - 1),
                            "ratio": pct(max(ratios) / min(ratios) - 1)},
            "ratio_median": round(statistics.median(ratios), 5),
            "ratio_sd_pct": pct(robust_sd(ratios) / statistics.median(ratios)),
            "group_ratios": [round(x, 5) for x in ratios]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", default="09_Swish:*,02_Softmax:*,02_Gemm_Divide_Sum_Scale:*",
                    help="TASK:SEED,... (SEED * = the task's first 'faster' seed)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--groups", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--target-ms", type=float, default=10.0, help="k: the reference's span takes about this long")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--graphs", action="store_true", help="CUDA: time graph replays of each group's k calls "
                    "(no host dispatch in the span: sub-percent placement effects show)")
    ap.add_argument("--out", type=Path, default=None, help="Append one JSON line per pair here too.")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    dev = torch.device(a.device)
    for pair in a.pairs.split(","):
        task_key, _, seed_name = pair.partition(":")
        t0 = time.monotonic()
        try:
            row = probe(task_key, seed_name or "*", dev, a.groups, a.rounds, a.target_ms, rng, a.graphs)
        except Exception as e:  # noqa: BLE001 - one broken pair never stops the others
            row = {"task": task_key, "error": f"{type(e).__name__}: {e}"}
        row["wall_s"] = round(time.monotonic() - t0, 1)
        line = json.dumps(row)
        print(line, flush=True)
        if a.out:
            with a.out.open("a") as f:
                f.write(line + "\n")
        if dev.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
