"""Static findings from the candidate source alone (information; runtime checks decide the score)."""

from __future__ import annotations

import re
import time
import traceback

from kernelrl.evaluation.result import EvalResult, candidate_frames

_PATTERNS = {
    "uses-side-stream": r"torch\.cuda\.Stream\(|cuda\.stream\(|cudaStreamCreate",
    "uses-cuda-graph": r"CUDAGraph|cuda\.graph\(|make_graphed_callables|cudaGraph",
    "changes-global-flags": r"allow_tf32|cudnn\.benchmark|cudnn\.deterministic|set_num_threads|"
    r"set_float32_matmul_precision|allow_fp16_reduced|allow_bf16_reduced",
    "touches-timing": r"\bperf_counter\b|time\.time\b|\bsynchronize\b|cuda\.Event|elapsed_time",
    "inspects-objects": r"\bgc\.get_objects|\binspect\.|sys\._getframe|get_referrers|__globals__",
    "spawns-processes": r"\bsubprocess\b|os\.fork|multiprocessing|threading\.Thread|os\.system|Popen",
}


def static_flags(source: str) -> list[str]:
    return [name for name, pat in _PATTERNS.items() if re.search(pat, source)]


# Sources above this size are left to the worker: compiling them here would cost the parent what the sandbox is for.
SYNTAX_CHECK_MAX_CHARS = 1_000_000


def syntax_error(source: str) -> SyntaxError | None:
    """The error compiling the candidate's source raises (``build-failed`` before any worker starts); None when it
    compiles or is left to the worker. Compiling runs none of its code. An RL batch is full of truncated and
    malformed generations: each took ~5 s of worker start-up to be told so on a 2-core host (the red team's
    syntax_error, 2026-11-29)."""
    if len(source) > SYNTAX_CHECK_MAX_CHARS:
        return None
    try:
        compile(source, "candidate.py", "exec", dont_inherit=True)
    except SyntaxError as e:
        return e
    except ValueError as e:  # null bytes, before Python 3.12
        return SyntaxError(str(e))
    except (RecursionError, MemoryError):  # a parser limit: the worker reports it as it would
        return None
    return None


# A compiler that runs at the candidate's first call (torch.compile/dynamo, Triton's JIT, TorchScript): its first
# forward gets the compile allowance (correctness.first_call_timeout), not the run limit. Not a flag: the source
# only names it.
_JIT = r"torch\.compile\b|@triton\.jit|triton\.jit\b|torch\.jit\.(script|trace)\b|torch\._dynamo"


def uses_jit(source: str) -> bool:
    """The source names a compiler that runs at the first call (torch.compile, Triton, TorchScript)."""
    return re.search(_JIT, source) is not None


# torch.compile's stack (dynamo, inductor and the modules torch.compile() pulls in: ~6-7 s on an H200 host, 2.5 s
# here) is imported by a spare worker while it waits (spares.py, worker_load.cmd_warm) when the source names it:
# the import, not the compile, was ~45% of a torch.compile baseline's evaluation on the H200 (its "build" phase,
# median 7.2 s of 16.2 s, KernelBench level 1). Not for a source that names an environment variable these modules
# read when imported (TORCHINDUCTOR_*, TORCHDYNAMO_*, TORCH_COMPILE_*, TORCH_LOGS, ...) or that writes the
# environment at all: its setting must reach them as it would in a worker that had not imported them yet.
_COMPILER = r"torch\.compile\b|torch\._dynamo\b|torch\._inductor\b"
_IMPORT_TIME_ENV = r"environ|putenv|TORCHINDUCTOR_|TORCHDYNAMO_|TORCH_COMPILE|TORCH_LOGS|TORCH_TRACE|TRITON_|PYTORCH_"


def preimports_compiler(source: str) -> bool:
    """A worker for this source may import torch.compile's modules before the source runs (see above)."""
    return re.search(_COMPILER, source) is not None and re.search(_IMPORT_TIME_ENV, source) is None


def syntax_failure(source: str, device_type: str, t_start: float | None = None) -> EvalResult | None:
    """The whole result for a source that does not compile (``build-failed``, worded as the worker words it, static
    flags kept), or None when it compiles. No worker and no torch: ``evaluate`` answers with it before starting any,
    and the cold ``kernelrl eval`` before its own torch import (a broken candidate took 4.7 s on the H100 there, 3.2
    s of it that import: bench/results/2026-12-06-h100-kernelbench, c24). ``t_start``: time.monotonic() at the
    evaluation's start (wall_s counts from it)."""
    t0 = time.monotonic() if t_start is None else t_start
    bad = syntax_error(source)
    if bad is None:
        return None
    result = EvalResult(device_type=device_type)
    for f in static_flags(source):
        result.flag(f)
    result.flag("build-failed")
    result.executable = result.correct = False
    result.speedup = 0.0
    frames = candidate_frames("".join(traceback.format_exception_only(bad)), "candidate.py")
    result.error = result.compile_error = f"SyntaxError: {bad}{frames}"[:4000]
    result.wall_s = round(time.monotonic() - t0, 3)
    return result
