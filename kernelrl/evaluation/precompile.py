"""Compile-ahead: build a candidate's extensions into the evaluator's compile cache before it is timed.

A candidate that calls ``torch.utils.cpp_extension.load_inline`` at import spends 30-60 s in nvcc the first time
(seen on an H100 host). ``precompile`` imports the module in the evaluator's own sandboxed worker (the candidate's
fresh uid, scrubbed environment, its per-source cache), so a later evaluation of the same source finds the build;
the evaluation service runs it for queued jobs while it times another, the benchmark for all candidates at once.
``ModelNew`` is not constructed and nothing is timed.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation.sandbox import DROP_PRIVILEGES, WorkerProcess

BUILD_MARKERS = ("load_inline", "cpp_extension")  # candidates whose import builds something worth doing ahead


def pin_cuda_arch(device: str) -> None:
    """Pin TORCH_CUDA_ARCH_LIST to this GPU's architecture when unset: pre-builds and timed builds then use the
    same nvcc flags (so the timed one finds the pre-built extension) and the pre-build needs no GPU."""
    if not device.startswith("cuda") or os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return
    try:
        import torch

        major, minor = torch.cuda.get_device_capability(int(device.split(":")[1]) if ":" in device else 0)
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}+PTX"  # what torch derives itself for one GPU
    except Exception:  # pragma: no cover - no usable GPU: the evaluation will say so
        pass


def candidate_cache_dir(source: str, cfg: EvalConfig) -> Path:
    """Where the evaluator keeps this source's builds (its per-source compile cache, kernelrl.evaluation.api)."""
    from kernelrl.evaluation.api import candidate_hash

    root = Path(cfg.cache_dir or (Path(tempfile.gettempdir()) / "kernelrl-compile-cache"))
    return root / "cand" / candidate_hash(source)[:24]


def precompile(source: str, cfg: EvalConfig, device: str | None = None) -> dict[str, Any]:
    """Import a candidate module in the evaluator's sandboxed worker process (the candidate's own unprivileged
    uid, scrubbed env, its per-source compile cache), which runs its module-level load_inline builds;
    ModelNew is not constructed. Returns {"ok": bool, "uid": ..., "error"?: ...}."""
    device = device or cfg.device
    try:  # the source's cache is held for this worker alone (sandbox.lock_cache): an evaluation of it may hold it
        w = WorkerProcess("cand", device=device, cache_dir=candidate_cache_dir(source, cfg),
                          mem_limit_mb=cfg.memory_limit_mb, threads=1, drop_privileges=DROP_PRIVILEGES,
                          module_source=source, lock_timeout=cfg.compile_timeout_s,
                          early_context=False)  # it loads on the CPU: no context on the GPU being timed
    except TimeoutError as e:
        return {"ok": False, "uid": None, "error": str(e)[:300]}
    try:
        # init_inputs=None: the module is imported (its builds run), then constructing ModelNew fails at once.
        h, _ = w.request({"cmd": "load", "role": "cand", "path": str(w.module_path), "device": "cpu", "seed": 0,
                          "train_mode": True, "init_inputs": None, "template": None},
                         timeout=cfg.compile_timeout_s)
        err = str(h.get("error") or "")
        # What fails after the import (constructing ModelNew without inputs, no ModelNew) does not matter here.
        imported = h.get("ok") or any(m in err for m in ("argument after * must be an iterable", "no class ModelNew"))
        return {"ok": bool(imported), "uid": w.uid, **({} if imported else {"error": err[:300]})}
    finally:
        w.close()
