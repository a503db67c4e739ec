"""How big each KernelBench problem is, without running it: inputs, parameters and outputs of every reference, built on
torch's ``meta`` device (shapes and dtypes only, no memory, no GPU). For planning GPU lanes (which tasks take the
evaluator's device comparison, which may not fit a card) before spending device time.

    python bench/kernelbench_sizes.py ../shared/kernelbench --out bench/results/DATE-cpu-kernelbench-sizes

Writes sizes.csv (one row per problem) and summary.json; prints the summary. A problem whose forward cannot run on
``meta`` (data-dependent control flow, .item(), an op without a meta kernel) gets its inputs' and parameters' sizes
and ``meta_error``; its output size is unknown.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import types
from pathlib import Path

import torch

MIB = 1024**2
DEVICE_COMPARE_MIN_BYTES = 64 * MIB  # kernelrl.evaluation.session.DEVICE_COMPARE_MIN_BYTES


def nbytes(xs) -> int:
    return sum(t.numel() * t.element_size() for t in flat(xs))


def flat(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in flat(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in flat(v)]
    return []


def measure(path: Path) -> dict:
    row: dict = {"level": int(path.parent.name.removeprefix("level")), "task": path.stem}
    mod = types.ModuleType(f"kb_{path.stem}")
    try:
        exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)  # noqa: S102 - benchmark data
        with torch.device("meta"):
            torch.manual_seed(0)
            inputs = mod.get_inputs()
            init = mod.get_init_inputs()
            model = mod.Model(*init)
    except Exception as e:  # noqa: BLE001 - reported per problem
        return row | {"load_error": f"{type(e).__name__}: {str(e)[:200]}"}
    row["input_bytes"] = nbytes(inputs)
    row["input_dtypes"] = ";".join(sorted({str(t.dtype).removeprefix("torch.") for t in flat(inputs)}))
    row["param_bytes"] = nbytes(list(model.parameters()) + list(model.buffers())) if isinstance(
        model, torch.nn.Module) else 0
    try:
        with torch.no_grad():
            out = model(*inputs)
        outs = flat(out)
        row["output_bytes"] = nbytes(outs)
        row["outputs"] = len(outs)
        row["output_shapes"] = ";".join("x".join(map(str, t.shape)) or "scalar" for t in outs)[:200]
    except Exception as e:  # noqa: BLE001
        row["meta_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return row


def summarize(rows: list[dict]) -> dict:
    known = [r for r in rows if "output_bytes" in r]
    big = [r for r in known if r["output_bytes"] >= DEVICE_COMPARE_MIN_BYTES]
    per_level: dict = {}
    for r in rows:
        lv = per_level.setdefault(str(r["level"]), {"tasks": 0, "output_known": 0, "device_compare": 0,
                                                    "output_ge_1gib": 0})
        lv["tasks"] += 1
        if "output_bytes" in r:
            lv["output_known"] += 1
            lv["device_compare"] += r["output_bytes"] >= DEVICE_COMPARE_MIN_BYTES
            lv["output_ge_1gib"] += r["output_bytes"] >= 1024 * MIB
    q = lambda xs, p: sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] if xs else None  # noqa: E731
    outs = [r["output_bytes"] / MIB for r in known]
    ins = [r["input_bytes"] / MIB for r in rows if "input_bytes" in r]
    # one evaluation's working set on one card, roughly: each worker holds its parameters, one input set and its
    # outputs, and correctness keeps one set's outputs per worker (the device comparison) beside them
    need = [2 * (r["param_bytes"] + r["input_bytes"] + 2 * r["output_bytes"]) / 1024**3 for r in known]
    return {
        "tasks": len(rows), "load_errors": sum("load_error" in r for r in rows),
        "meta_errors": sum("meta_error" in r for r in rows), "output_known": len(known),
        "device_compare_tasks": len(big), "output_ge_1gib": sum(r["output_bytes"] >= 1024 * MIB for r in known),
        "output_mib": {"median": q(outs, 0.5), "p90": q(outs, 0.9), "max": max(outs, default=None)},
        "input_mib": {"median": q(ins, 0.5), "p90": q(ins, 0.9), "max": max(ins, default=None)},
        "working_set_gib_max": round(max(need, default=0.0), 1),
        "working_set_over_70gib": [r["task"] for r, n in zip(known, need) if n > 70],
        "per_level": per_level,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="The KernelBench folder (level1/, level2/, level3/).")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    files = sorted(a.root.glob("level[123]/*.py"), key=lambda p: (p.parent.name, int(p.stem.split("_")[0])))
    if not files:
        sys.exit(f"{a.root}: no level1/2/3 problems")
    rows = [measure(p) for p in files]
    a.out.mkdir(parents=True, exist_ok=True)
    keys = ["level", "task", "input_bytes", "param_bytes", "output_bytes", "outputs", "input_dtypes",
            "output_shapes", "meta_error", "load_error"]
    with open(a.out / "sizes.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    s = summarize(rows)
    (a.out / "summary.json").write_text(json.dumps(s, indent=1) + "\n")
    print(json.dumps(s, indent=1))
    assert math.isfinite(s["working_set_gib_max"])


if __name__ == "__main__":
    main()
