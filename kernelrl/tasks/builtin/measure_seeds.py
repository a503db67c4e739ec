"""Check and time the built-in seed corpus against the references (the tables in README.md come from here).

usage: OMP_NUM_THREADS=1 .venv/bin/python kernelrl/tasks/builtin/measure_seeds.py [NAME ...] [--device cpu|cuda]
       [--rounds N] [--blocks N]

For every task (or the tasks whose key contains one of the NAME substrings) and every seed that can run on the
device (on cpu: ``device: any`` seeds; on cuda: all): whether the seed matches the reference on 3 random input
sets, and the median time per call of both (blocks of calls, reference and seed alternating block by block).
Prints a Markdown table; exits 1 if any seed's header claim does not hold: correct/wrong on every device, speed
(faster / slower) on the device the seed targets (cpu for ``device: any``, the GPU for ``device: cuda``).
On cpu it runs on one thread. On cuda, TF32 is switched off so that fp32 results compare at 1e-4, and every
timed call is bracketed by torch.cuda.synchronize(). This is a claim check, not the hardened evaluator: it
execs the files in this process.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from kernelrl.tasks import load_suite
from kernelrl.tasks.seeds import load_seeds


def exec_source(source: str, name: str, path=None) -> dict:
    """Run a task or seed file in a fresh module namespace. Give ``path`` when the file exists: Triton's @jit
    reads the kernel's source back through its file name."""
    filename = str(path) if path else name
    ns: dict = {"__name__": name, "__file__": filename}
    exec(compile(source, filename, "exec"), ns)  # noqa: S102 - trusted files from our own corpus
    return ns


def build_pair(task_ns: dict, seed_ns: dict, device: str = "cpu", seed: int = 0):
    """Model and ModelNew built under the same RNG seed; ModelNew takes Model's weights where names match."""
    init = task_ns["get_init_inputs"]()
    torch.manual_seed(seed)
    ref = task_ns["Model"](*init)
    torch.manual_seed(seed)
    new = seed_ns["ModelNew"](*init)
    own = new.state_dict()
    shared = {k: v for k, v in ref.state_dict().items() if k in own and own[k].shape == v.shape}
    new.load_state_dict(shared, strict=False)
    return ref.to(device), new.to(device)


def _flat(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    raise TypeError(f"output of type {type(out).__name__}")


def compare(out, ref, rtol: float = 1e-4, atol: float = 1e-4, max_rel_norm: float = 1e-4) -> str | None:
    """None when ``out`` matches ``ref`` (allclose with atol scaled by max(1, max|ref|), and relative L2 error);
    else a short reason."""
    a, b = _flat(out), _flat(ref)
    if len(a) != len(b):
        return f"{len(a)} outputs, reference has {len(b)}"
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return f"shape {tuple(x.shape)} != {tuple(y.shape)}"
        x, y = x.detach().double().cpu(), y.detach().double().cpu()
        scale = max(1.0, y.abs().max().item()) if y.numel() else 1.0
        if not torch.allclose(x, y, rtol=rtol, atol=atol * scale):
            return f"max abs err {(x - y).abs().max().item():.3g} (scale {scale:.3g})"
        rel = ((x - y).norm() / y.norm().clamp_min(1e-12)).item()
        if rel > max_rel_norm:
            return f"relative error norm {rel:.3g}"
    return None


def _inputs(task_ns: dict, seed: int, device: str) -> list:
    torch.manual_seed(seed)
    return [t.to(device) if isinstance(t, torch.Tensor) else t for t in task_ns["get_inputs"]()]


def check_seed(task_ns: dict, seed_ns: dict, device: str = "cpu", n_inputs: int = 3) -> str | None:
    ref, new = build_pair(task_ns, seed_ns, device)
    with torch.no_grad():
        for i in range(n_inputs):
            inputs = _inputs(task_ns, 1000 + i, device)
            expected = ref(*[t.clone() for t in inputs])
            got = new(*[t.clone() for t in inputs])
            why = compare(got, expected)
            if why:
                return why
    return None


def time_call(model, inputs, rounds: int, cuda: bool = False) -> list[float]:
    out = []
    for _ in range(rounds):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(*inputs)
        if cuda:
            torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def time_pair(ref, new, inputs, rounds: int = 10, blocks: int = 3, cuda: bool = False) -> tuple[float, float]:
    """Median ms per call of ref and new: blocks of ``rounds`` calls each, alternating ref and new block by block.

    Blocks rather than call-by-call alternation: on CPU one model's allocations change the other's cost (oneDNN
    scratch buffers, allocator state), and the claim to check is each one's steady-state time.
    """
    tr: list[float] = []
    tn: list[float] = []
    with torch.no_grad():
        for _ in range(blocks):
            for model, acc in ((ref, tr), (new, tn)):
                model(*inputs)  # warm-up after the switch
                acc += time_call(model, inputs, rounds, cuda)
    return statistics.median(tr), statistics.median(tn)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="only tasks whose key contains one of these")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to run (cpu: one thread)")
    ap.add_argument("--rounds", type=int, default=10, help="timed calls per block (medians are reported)")
    ap.add_argument("--blocks", type=int, default=3, help="blocks per model, alternating reference and seed")
    args = ap.parse_args(argv)
    cuda = args.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # compare fp32 with fp32, not TF32 rounding
        torch.backends.cudnn.allow_tf32 = False
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    else:
        torch.set_num_threads(1)
        print(f"device: cpu, 1 thread, torch {torch.__version__}\n")
    tasks = [t for t in load_suite("builtin") if not args.names or any(n in t.key for n in args.names)]
    print("| task | seed | expect | device | check | ref ms | seed ms | speedup |")
    print("|---|---|---|---|---|---|---|---|")
    bad = 0
    for task in tasks:
        task_ns = exec_source(task.source, task.name, task.path)
        for seed in load_seeds(task):
            row = f"| {task.key} | {seed.name} | {seed.expect} | {seed.device} |"
            if seed.device == "cuda" and not cuda:
                continue
            try:
                seed_ns = exec_source(seed.source, f"seed_{seed.name}", seed.path)
                why = check_seed(task_ns, seed_ns, args.device)
                ref, new = build_pair(task_ns, seed_ns, args.device)
                tr, tn = time_pair(ref, new, _inputs(task_ns, 1, args.device), args.rounds, args.blocks, cuda)
            except Exception as e:  # report and go on: one broken seed must not hide the others
                bad += 1
                print(f"{row} ERROR {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''} | | | |")
                sys.stdout.flush()
                continue
            ok = (why is not None) if seed.expect == "wrong" else (why is None)
            sp = tr / tn
            # speed claims are about the device the seed is written for: CPU for "any" seeds, the GPU for "cuda"
            judged = seed.device == "cuda" if cuda else seed.device == "any"
            if judged and (seed.expect == "faster" and sp <= 1.0 or seed.expect == "slower" and sp >= 1.0):
                ok = False
            bad += not ok
            status = ("ok" if ok else "CLAIM FAILS") + (f" ({why})" if why else "")
            print(f"{row} {status} | {tr:.3f} | {tn:.3f} | {sp:.2f}x |")
            sys.stdout.flush()
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
