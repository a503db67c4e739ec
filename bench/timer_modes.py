"""Which clock can give a repeatable GPU speedup on this machine? A yardstick in one process (not hack-proof,
like bench/gpu_noise_floor.py): three timers measured side by side in the same blocks, so they see the same
machine states.

    python bench/timer_modes.py --only 0:12 --evals 5 --eval-s 1.0 --long-factor 5 --out DIR

Modes (per block, the reference and the candidate in alternating order, k calls each on pre-staged inputs):
  wall     device sync, host clock over the k calls, device sync: what the evaluator's spans measure today
           (host dispatch and GPU work together; a launch-bound side runs at the host's speed)
  blocked  a spin kernel (torch.cuda._sleep) holds the stream while the host queues the k calls; CUDA events
           after the spin and after the k calls: the GPU's own time for them (nvbench's blocking kernel). A block
           whose queueing outlasted the spin is counted as starved (the GPU then waited for the host)
  graph    the k calls captured once into a CUDA graph; events around a replay (skipped where capture fails)
  events   CUDA events around each of the k calls, no sync between them (KernelBench's / CUDA-L1's timer, less
           their per-call sync)
and, from the blocked mode's blocks: blocked_fed (only blocks where neither side starved the GPU) and hybrid
(per side max(GPU time, host queueing time): whichever of host and GPU is slower bounds a pipelined call).
One host probe (a fixed Python loop) before each block. An evaluation's value per mode: the median over its
blocks of the block ratio reference/candidate. Prints per task and mode the evaluations' values, max/min - 1,
the long run's value and the correlation of log(block ratio) with log(probe); rows.jsonl keeps every block.
Evaluator v5 on the H100 (bench/results/2026-11-25-h100-evaluator-v5) saw the host switch between a fast and a
slow state for seconds at a time, and the launch-bound references' ratios move with it: this asks whether a GPU
clock does not.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from analyze_rounds import pearson  # noqa: E402
from evaluator_bench import candidates  # noqa: E402
from kernelrl.config.stages import EvalConfig  # noqa: E402
from kernelrl.evaluation.precompile import candidate_cache_dir, pin_cuda_arch  # noqa: E402

MODES = ("wall", "blocked", "graph", "events")
DERIVED = ("blocked_fed", "hybrid")  # from the blocked mode's blocks (summarize_blocks)


def load(source: str, name: str, cache: Path | None = None):
    import os

    if cache is not None:  # the evaluator's per-source compile cache: its pre-built extensions are found there
        os.environ["TORCH_EXTENSIONS_DIR"] = str(cache / "torch_extensions")
        os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def probe() -> float:
    t0 = time.perf_counter()
    s = 0
    for i in range(20000):
        s += i * i
    return (time.perf_counter() - t0) * 1e6


class Side:
    def __init__(self, model, xs, k):
        self.model, self.xs, self.k = model, xs, k
        self.graph = None

    def calls(self):
        for i in range(self.k):
            self.model(*self.xs[i % len(self.xs)])

    def wall(self) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        self.calls()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def blocked(self, spin_cycles: int, spin_s: float) -> tuple[float, float]:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        torch.cuda._sleep(spin_cycles)
        s.record()
        t0 = time.perf_counter()
        self.calls()
        queued = time.perf_counter() - t0
        e.record()
        e.synchronize()
        return s.elapsed_time(e) / 1e3, queued

    def try_capture(self) -> str | None:
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    self.calls()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                self.calls()
            torch.cuda.synchronize()
            self.graph = g
            return None
        except Exception as e:  # noqa: BLE001 - many candidates cannot be captured
            torch.cuda.synchronize()
            return f"{type(e).__name__}: {str(e)[:120]}"

    def events(self) -> float:
        """CUDA events around each call (no sync between calls): the GPU timeline of each call, host gaps inside
        a call included (KernelBench's and CUDA-L1's timer, without their per-call sync)."""
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(self.k)]
        torch.cuda.synchronize()
        for i, (s, e) in enumerate(evs):
            s.record()
            self.model(*self.xs[i % len(self.xs)])
            e.record()
        torch.cuda.synchronize()
        return sum(s.elapsed_time(e) for s, e in evs) / 1e3

    def replay(self) -> float:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record()
        self.graph.replay()
        e.record()
        e.synchronize()
        return s.elapsed_time(e) / 1e3


def run_eval(ref: Side, cand: Side, seconds: float, spin: tuple[int, float], blocks_out: list) -> dict:
    t_end = time.monotonic() + seconds
    b = 0
    while time.monotonic() < t_end or b < 4:
        blk = {"probe_us": round(probe(), 1), "queued": [0.0, 0.0], "starved_side": [False, False]}
        order = (ref, cand) if b % 2 == 0 else (cand, ref)
        for mode in MODES:
            if mode == "graph" and (ref.graph is None or cand.graph is None):
                continue
            t = {}
            for side in order:
                if mode == "wall":
                    t[id(side)] = side.wall()
                elif mode == "blocked":
                    t[id(side)], queued = side.blocked(*spin)
                    j = 0 if side is ref else 1
                    blk["queued"][j] = queued
                    blk["starved_side"][j] = queued > spin[1]
                    blk["starved"] = any(blk["starved_side"])
                elif mode == "events":
                    t[id(side)] = side.events()
                else:
                    t[id(side)] = side.replay()
            blk[mode] = [t[id(ref)], t[id(cand)]]
        blocks_out.append(blk)
        b += 1
    return summarize_blocks(blocks_out)


def summarize_blocks(blocks: list) -> dict:
    out = {"blocks": len(blocks), "starved": sum(1 for x in blocks if x.get("starved"))}
    for mode in MODES:
        rs = [x[mode][0] / x[mode][1] for x in blocks if mode in x and x[mode][1] > 0]
        if not rs:
            continue
        out[mode] = statistics.median(rs)
        ps = [math.log(x["probe_us"]) for x in blocks if mode in x and x[mode][1] > 0]
        lr = [math.log(r) for r in rs]
        c = pearson(ps, lr)
        out[f"{mode}_corr_probe"] = None if math.isnan(c) else round(c, 3)
        out[f"{mode}_ref_ms"] = statistics.median(x[mode][0] for x in blocks if mode in x) * 1e3
        out[f"{mode}_cand_ms"] = statistics.median(x[mode][1] for x in blocks if mode in x) * 1e3
    # blocked_fed: the blocked mode over the blocks where neither side's queueing outlasted the spin (the GPU was
    # fed throughout); hybrid: per side max(GPU time, host queueing time) in every block (a pipelined call's cost:
    # whichever of host and GPU is slower), so a host-bound side is charged its host time.
    fed = [x for x in blocks if "blocked" in x and not x.get("starved")]
    if fed:
        out["blocked_fed"] = statistics.median(x["blocked"][0] / x["blocked"][1] for x in fed)
        out["fed_blocks"] = len(fed)
    hyb = [(max(x["blocked"][0], x["queued"][0]), max(x["blocked"][1], x["queued"][1])) for x in blocks
           if "blocked" in x]
    if hyb:
        out["hybrid"] = statistics.median(r / c for r, c in hyb)
    return out


def bench_pair(task, seed, a) -> dict:
    cfg = EvalConfig(device="cuda")
    rmod = load(task.source, "ref_mod")
    cmod = load(seed.source, "cand_mod", candidate_cache_dir(seed.source, cfg))
    init = rmod.get_init_inputs()
    torch.manual_seed(0)
    rm = rmod.Model(*init).cuda()
    torch.manual_seed(0)
    cm = cmod.ModelNew(*init).cuda()
    own = cm.state_dict()
    cm.load_state_dict({k: v for k, v in rm.state_dict().items() if k in own and own[k].shape == v.shape},
                       strict=False)
    torch.manual_seed(1)
    xs = [[x.cuda() if torch.is_tensor(x) else x for x in rmod.get_inputs()] for _ in range(a.stage)]
    row = {"task": task.key, "seed": seed.name}
    with torch.no_grad():
        one_r, one_c = Side(rm, xs, 1), Side(cm, xs, 1)
        for _ in range(3):
            one_r.wall(), one_c.wall()
        per_call = max(statistics.median(one_r.wall() for _ in range(5)), statistics.median(one_c.wall()
                                                                                           for _ in range(5)))
        k = max(1, min(a.max_k, round(a.block_ms * 1e-3 / per_call)))
        ref, cand = Side(rm, xs, k), Side(cm, xs, k)
        # The spin: --spin-factor x the slower side's host time for k calls (wall per call bounds it) + 0.2 ms.
        t_cal = time.perf_counter()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.cuda._sleep(1_000_000)
        e.record()
        e.synchronize()
        s_per_cycle = s.elapsed_time(e) / 1e3 / 1_000_000
        spin_s = a.spin_factor * max(ref.wall(), cand.wall()) + 2e-4
        spin = (int(spin_s / s_per_cycle), spin_s)
        row.update(k=k, per_call_ms=round(per_call * 1e3, 4), spin_ms=round(spin_s * 1e3, 3),
                   capture={"ref": ref.try_capture(), "cand": cand.try_capture()},
                   calibrate_s=round(time.perf_counter() - t_cal, 2))
        for _ in range(2):  # warm every mode once
            run_eval(ref, cand, 0.0, spin, [])
        row["evals"], row["blocks"] = [], []
        for i in range(a.evals + 1):
            blocks: list = []
            secs = a.eval_s * (a.long_factor if i == a.evals else 1)
            res = run_eval(ref, cand, secs, spin, blocks)
            (row.setdefault("long", res) if i == a.evals else row["evals"].append(res))
            row["blocks"].append(blocks)
    for mode in MODES + DERIVED:
        vals = [e[mode] for e in row["evals"] if mode in e]
        if len(vals) == a.evals:
            row[f"{mode}_dev"] = max(vals) / min(vals) - 1
            if mode in row.get("long", {}):
                row[f"{mode}_agree"] = abs(statistics.median(vals) / row["long"][mode] - 1)
                row[f"{mode}_over"] = max(v / row["long"][mode] - 1 for v in vals)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="0:12", help="a slice i:j of bench/evaluator_bench.py's candidate list, or "
                    "a comma list of indices")
    ap.add_argument("--evals", type=int, default=5)
    ap.add_argument("--eval-s", type=float, default=1.0)
    ap.add_argument("--long-factor", type=float, default=5.0)
    ap.add_argument("--block-ms", type=float, default=2.0, help="the slower side's wall time per block (k calls)")
    ap.add_argument("--max-k", type=int, default=64)
    ap.add_argument("--stage", type=int, default=8, help="distinct input sets staged (reused cyclically)")
    ap.add_argument("--spin-factor", type=float, default=3.0, help="the spin kernel's length: this x the slower "
                    "side's wall time for k calls (+0.2 ms); the host must queue the k calls within it")
    ap.add_argument("--max-minutes", type=float, default=5.0)
    ap.add_argument("--pair-timeout-s", type=float, default=120.0)
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    pin_cuda_arch("cuda")
    cands = candidates("cuda")
    if a.one is not None:  # a child: one pair, its row appended (a failed capture can poison a CUDA context)
        task, seed = cands[a.one]
        t0 = time.monotonic()
        try:
            row = bench_pair(task, seed, a)
        except Exception:  # noqa: BLE001 - reported in the row
            row = {"task": task.key, "seed": seed.name, "error": traceback.format_exc()[-600:]}
        row["wall_s"] = round(time.monotonic() - t0, 1)
        with open(a.out / "rows.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        brief = {k: v for k, v in row.items() if k not in ("blocks", "evals", "long")}
        for mode in MODES + DERIVED:
            vals = [e.get(mode) for e in row.get("evals", [])]
            if vals and all(v is not None for v in vals):
                brief[mode] = [round(v, 4) for v in vals] + [round(row["long"].get(mode, 0), 4)]
                brief[f"{mode}_corr"] = row["long"].get(f"{mode}_corr_probe")
        brief["starved"] = [e["starved"] for e in row.get("evals", [])]
        print(json.dumps(brief, default=str), flush=True)
        return
    if ":" in a.only:
        i, j = (int(x) if x else None for x in a.only.split(":"))
        idx = list(range(len(cands)))[i:j]
    else:
        idx = [int(x) for x in a.only.split(",")]
    t_stop = time.monotonic() + a.max_minutes * 60
    for n in idx:
        if time.monotonic() > t_stop:
            print(json.dumps({"stopped_early_before": cands[n][0].key}), flush=True)
            break
        args = [sys.executable, __file__, "--one", str(n), "--out", str(a.out)] + [
            f"--{k.replace('_', '-')}={getattr(a, k)}" for k in ("evals", "eval_s", "long_factor", "block_ms",
                                                                  "max_k", "stage", "spin_factor")]
        try:
            subprocess.run(args, timeout=a.pair_timeout_s, check=False)
        except subprocess.TimeoutExpired:
            print(json.dumps({"task": cands[n][0].key, "error": f"timed out after {a.pair_timeout_s} s"}), flush=True)


if __name__ == "__main__":
    main()
