"""The code that runs inside a sandboxed worker process (reference or candidate).

    python -m kernelrl.evaluation.worker FD_IN FD_OUT

It answers the parent's commands over the channel (``kernelrl.evaluation.ipc``). Anything here can be patched
by a hostile candidate living in the same process, so the parent trusts nothing it says except the bytes it
returns and *when* they arrive: the parent holds the clock, compares outputs, and never unpickles.
Commands: load, load_state, inputs (reference only), run (correctness), stage / go / digest (one timing round in
three parent-timed phases), capture (CUDA graphs of the spans' calls, EvalConfig.cuda_graphs), quiesce (reference
only), fetch (audit), echo, bandwidth.
"""

from __future__ import annotations

import gc
import importlib.util
import math
import os
import random
import sys
import time
import traceback

import torch

from kernelrl.evaluation.held import SEM_DONE, SEM_GO
from kernelrl.evaluation.ipc import Channel

_perf = time.perf_counter  # bound before any candidate code runs (which may patch time.perf_counter)

STATE: dict = {"ext_builds": [], "ext_failures": []}


def _watch_extension_builds() -> None:
    """Record load_inline/load outcomes (a failed build hidden behind try/except is still recorded)."""
    try:
        import torch.utils.cpp_extension as ce
    except Exception:  # pragma: no cover
        return
    for name in ("load_inline", "load"):
        orig = getattr(ce, name)

        def wrapped(*a, __orig=orig, __name=name, **kw):
            try:
                mod = __orig(*a, **kw)
            except BaseException as e:
                STATE["ext_failures"].append(f"{__name}: {type(e).__name__}: {str(e)[:300]}")
                raise
            STATE["ext_builds"].append(__name)
            return mod

        setattr(ce, name, wrapped)
    if _device().type == "cuda":  # Triton compiles lazily, at the first call of a kernel: watch its compiler too
        try:
            import triton.compiler.compiler as tc

            orig_compile = tc.compile

            def compile_watched(*a, **kw):
                try:
                    res = orig_compile(*a, **kw)
                except BaseException as e:
                    STATE["ext_failures"].append(f"triton: {type(e).__name__}: {str(e)[:300]}")
                    raise
                if "triton" not in STATE["ext_builds"]:
                    STATE["ext_builds"].append("triton")
                return res

            tc.compile = compile_watched
            import triton.compiler as tcp

            tcp.compile = compile_watched
        except Exception:  # noqa: BLE001 - no Triton here
            pass


def _device() -> torch.device:
    return torch.device(STATE.get("device", "cpu"))


# Bound before any candidate code runs, like _perf: a candidate that replaces torch.cuda.synchronize with a no-op
# does not change what this harness waits for (it can still patch this module; then its deferred work lands in
# the parent-timed harness phases and is charged to it).
_cuda_sync = getattr(torch._C, "_cuda_synchronize", None) or torch.cuda.synchronize


def _sync() -> None:
    if _device().type == "cuda":
        _held_settle()
        _cuda_sync()  # the whole device (every stream of this process), not one stream


def _held_settle() -> None:
    """End of a held phase's GPU work (see _held_done): DONE is written, then the worker *sleeps* until its stream
    is through (a blocking event), so its CPU time in the phase, which the parent reads from the kernel, is its
    host work and no busy-wait. Nothing when no held phase is open."""
    if "held_seq" not in STATE:
        return
    _held_done()
    ev = _event(blocking=True)
    _record(ev)
    ev.synchronize()


# The device clock (EvalConfig.clock = "device"), bound before any candidate code runs: CUDA events, the current
# stream and the spin kernel. The events are torch's C type (its methods cannot be replaced); a candidate can still
# patch this module, which is why the parent keeps its own clock around every span as the check (see cmd_go).
_cuda_event_base = getattr(torch._C, "_CudaEventBase", None)
_cuda_event_class = torch.cuda.Event
_current_stream = torch.cuda.current_stream
_cuda_sleep = getattr(torch._C, "_cuda_sleep", None) or getattr(torch.cuda, "_sleep", None)


def _event(blocking: bool = False):
    try:
        return _cuda_event_base(enable_timing=True, blocking=blocking)
    except TypeError:  # a torch whose base type takes other arguments
        return _cuda_event_class(enable_timing=True, blocking=blocking)


def _record(ev) -> None:
    _cuda_event_base.record(ev, _current_stream())  # the base type's method: a patched Event.record is bypassed


def _spin_rate() -> float:
    """Seconds per cycle of the spin kernel on this GPU (measured once: a 2M-cycle spin between two events)."""
    rate = STATE.get("spin_rate")
    if rate is None:
        a, b = _event(), _event()
        _cuda_sleep(1000)  # loads the kernel
        _record(a)
        _cuda_sleep(2_000_000)
        _record(b)
        b.synchronize()
        rate = STATE["spin_rate"] = a.elapsed_time(b) / 1e3 / 2_000_000
    return rate


# The held clock (EvalConfig.clock = "held"): a trusted holder process of the parent's (role "holder", our code
# only) times every held phase of a worker (a timed span, staging, the digest) on the GPU's clock, in its own
# CUDA context. Per side, one 4 KB file in /dev/shm mapped here and registered with CUDA holds two 32-bit
# semaphores: GO (the holder's stream writes the phase's number after a chain of short spins that holds the GPU
# while this worker queues the phase's work) and DONE (this worker's stream writes it after the work; the
# holder's stream waits for it and records its end event). Across uids: file permissions, not CUDA IPC. A
# worker that skips the wait runs in the chain's gaps and lengthens the holder's hold (charged); one that writes
# DONE early leaves work past the holder's end event, which the parent's clock around the phase shows (charged).


def _stream_value_fns():
    """libcuda's cuStreamWaitValue32 / cuStreamWriteValue32 (the _v2 names where the driver has them)."""
    import ctypes

    lib = ctypes.CDLL("libcuda.so.1")
    fns = []
    for names in (("cuStreamWaitValue32_v2", "cuStreamWaitValue32"),
                  ("cuStreamWriteValue32_v2", "cuStreamWriteValue32")):
        f = next(getattr(lib, n) for n in names if hasattr(lib, n))
        f.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        f.restype = ctypes.c_int
        fns.append(f)
    return fns


def _map_semaphores(path: str) -> int:
    """Map ``path`` (4 KB) shared and register it with CUDA (portable, mapped); returns its address, which is
    also its device address (unified addressing). Kept alive in STATE for the process's life."""
    import ctypes
    import mmap

    fd = os.open(path, os.O_RDWR)
    mm = mmap.mmap(fd, 4096)
    buf = (ctypes.c_char * 4096).from_buffer(mm)
    addr = ctypes.addressof(buf)
    rc = torch.cuda.cudart().cudaHostRegister(addr, 4096, 0x01 | 0x02)  # cudaHostRegisterPortable | Mapped
    if int(rc) != 0:
        raise RuntimeError(f"cudaHostRegister of the held clock's semaphores failed ({rc})")
    STATE.setdefault("sem_keep", []).append((fd, mm, buf))
    return addr


def _stream_op(fn, addr: int, value: int, what: str) -> None:
    rc = fn(_current_stream().cuda_stream, addr, value & 0xFFFFFFFF, 0)  # wait: GEQ (0); write: default (0)
    if rc:
        raise RuntimeError(f"{what} failed (CUresult {rc})")


def cmd_sem(h, _tensors):
    """A worker of a held-clock evaluation: map its side's semaphore page (see above)."""
    torch.zeros(1, device=_device())  # the context exists before the page is registered in it
    STATE["sem"] = _map_semaphores(h["path"])
    STATE["sem_fns"] = _stream_value_fns()
    _sync()
    return {"ok": True}, []


def _held_begin(h) -> None:
    """At the start of a held phase: the worker's stream waits for GO >= the phase's number (the holder writes it
    after its hold), so everything this phase queues runs after the hold."""
    seq = h.get("held")
    if seq is None or "sem" not in STATE:
        STATE.pop("held_seq", None)
        return
    STATE["held_seq"] = int(seq)
    STATE["held_t0"] = _perf()
    _stream_op(STATE["sem_fns"][0], STATE["sem"] + SEM_GO, int(seq), "cuStreamWaitValue32")


def _held_done() -> None:
    """After a held phase's last GPU work, before any host sync: the stream writes DONE (the holder's end event
    follows it). Once per phase; also records how long the host took to queue the phase (queued_s)."""
    seq = STATE.pop("held_seq", None)
    if seq is None:
        return
    STATE["held_queued_s"] = _perf() - STATE.get("held_t0", _perf())
    _stream_op(STATE["sem_fns"][1], STATE["sem"] + SEM_DONE, seq, "cuStreamWriteValue32")


def _holder_chain(cycles: int, chain: int) -> None:
    for _ in range(chain):
        _cuda_sleep(max(1000, cycles // chain))


def cmd_holder(h, _tensors):
    """The holder (our process, never the candidate's): map both sides' semaphore pages; measure the spin rate."""
    STATE["device"] = h["device"]
    dev = _device()
    if dev.type == "cuda":
        torch.cuda.set_device(dev.index or 0)
    torch.zeros(1, device=dev)
    STATE["holder_sems"] = {side: _map_semaphores(path) for side, path in h["paths"].items()}
    STATE["sem_fns"] = _stream_value_fns()
    STATE["holder_events"] = None
    _sync()
    return {"ok": True, "spin_rate": _spin_rate()}, []


def cmd_hold(h, _tensors):
    """The holder: on its stream, event a, a chain of ``chain`` short spins (``cycles`` in all), event b, GO :=
    ``seq`` on ``side``'s page, wait for DONE >= ``seq``, event c. Replies once queued (not when done): the
    parent then sends the worker its phase. ``held`` reads the three events afterwards."""
    side, seq = h["side"], int(h["seq"])
    addr = STATE["holder_sems"][side]
    wait, write = STATE["sem_fns"]
    a, b, c = _event(), _event(), _event()
    t0 = _perf()
    _record(a)
    _holder_chain(int(h["cycles"]), max(1, int(h.get("chain") or 1)))
    _record(b)
    _stream_op(write, addr + SEM_GO, seq, "cuStreamWriteValue32")
    _stream_op(wait, addr + SEM_DONE, seq, "cuStreamWaitValue32")
    _record(c)
    STATE["holder_events"] = (a, b, c)
    STATE["spin_next"] = 0.05  # busy-poll for the ``held`` that follows (on a spare core)
    return {"ok": True, "queued_s": _perf() - t0}, []


def cmd_held(h, _tensors):
    """The holder, after the worker replied (and the parent wrote DONE itself, so this never waits forever): the
    hold's length (a to b: the chain, longer if another context ran during it) and the phase's (b to c)."""
    a, b, c = STATE["holder_events"]
    c.synchronize()
    STATE["spin_next"] = 0.02  # and for the next ``hold``, when the spans follow each other
    return {"ok": True, "hold_s": a.elapsed_time(b) / 1e3, "work_s": b.elapsed_time(c) / 1e3}, []


def _flatten_outputs(out) -> list[torch.Tensor]:
    if isinstance(out, (tuple, list)):
        items = list(out)
    else:
        items = [out]
    for o in items:
        if not isinstance(o, torch.Tensor):
            raise TypeError(f"forward() returned {type(o).__name__}, expected torch.Tensor(s)")
        if type(o) is not torch.Tensor and not isinstance(o, torch.nn.Parameter):
            raise TypeError(f"OUTPUT_SUBCLASS: forward() returned a {type(o).__name__}, not a plain torch.Tensor")
    return items


def _schedule_blocking_sync() -> None:
    """BLOCKING_SYNC (the parent sets KERNELRL_BLOCKING_SYNC for the reference and candidate workers,
    never the holder): before this process's CUDA context exists, give the device's primary context
    CU_CTX_SCHED_BLOCKING_SYNC, so the model's own synchronisations (``.item()``, ``.tolist()``, a copy to the host)
    sleep instead of spinning. Why: under the held clock such a sync waits out the holder's hold, and a spinning
    wait is CPU time, which the host check (held.charges "cpu") cannot tell from host work done while the hold
    kept the GPU: an honest MoE that syncs once a call was charged 30 ms a call (H100, ninth session). The
    harness's own waits sleep already (_held_settle). Once per process; the result is in STATE["sched"]."""
    if "sched" in STATE or os.environ.get("KERNELRL_BLOCKING_SYNC") != "1":
        return
    import ctypes

    STATE["sched"] = "default"
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        if lib.cuInit(0) != 0:
            return
        dev = ctypes.c_int()
        index = torch.device(STATE.get("device") or "cuda").index or 0
        if lib.cuDeviceGet(ctypes.byref(dev), index) != 0:
            return
        fn = getattr(lib, "cuDevicePrimaryCtxSetFlags_v2", None) or lib.cuDevicePrimaryCtxSetFlags
        rc = fn(dev, 0x04)  # CU_CTX_SCHED_BLOCKING_SYNC
        STATE["sched"] = "blocking" if rc == 0 else f"default (CUresult {rc})"
    except (OSError, AttributeError) as e:
        STATE["sched"] = f"default ({type(e).__name__})"


def cmd_warm(h, _tensors):
    """A spare worker, started ahead of an evaluation (before any task or candidate code exists in it): create the
    device context now, so the evaluation that takes it pays neither the interpreter, the torch import nor this."""
    dev = torch.device(h["device"])
    if dev.type == "cuda":
        STATE["device"] = h["device"]
        _schedule_blocking_sync()
        torch.cuda.set_device(dev.index or 0)
        torch.zeros(1, device=dev)
        torch.cuda.synchronize()
    return {"ok": True, "sched": STATE.get("sched", "default")}, []


def cmd_load(h, _tensors):
    if h.get("cache_dir"):  # a spare worker learns its compile cache now (its environment was set before)
        os.environ["TORCH_EXTENSIONS_DIR"] = os.path.join(h["cache_dir"], "torch_extensions")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(h["cache_dir"], "triton")
    STATE["device"] = h["device"]
    STATE["seed"] = int(h["seed"])
    if _device().type == "cuda":
        _schedule_blocking_sync()  # before this process's context exists (a spare's was made in cmd_warm)
        torch.cuda.set_device(_device().index or 0)
    # Full float32 for both sides: cuDNN's TF32 default would make the reference itself inexact.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    _watch_extension_builds()
    spec = importlib.util.spec_from_file_location(f"kernelrl_{h['role']}_module", h["path"])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # a real file, so Triton's @jit can find its source
    STATE["module"] = module
    cls_name = "Model" if h["role"] == "ref" else "ModelNew"
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise NameError(f"the file defines no class {cls_name}")
    init = module.get_init_inputs() if h["role"] == "ref" else h["init_inputs"]
    torch.manual_seed(h["seed"])
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(h["seed"])
    model = cls(*init)
    if isinstance(model, torch.nn.Module):
        model = model.to(_device())
        model.train(bool(h["train_mode"]))
    STATE["model"] = model
    gc.collect()
    gc.freeze()  # what exists now (torch, the module, the model) is never scanned again: short, rare collections
    reply = {"ok": True, "ext_builds": STATE["ext_builds"], "ext_failures": STATE["ext_failures"],
             "sched": STATE.get("sched", "default")}
    tensors = []
    STATE["template"] = h.get("template")
    if h["role"] == "ref":
        reply["template"] = STATE["template"] = _input_template(module)
        reply["init_inputs"] = _jsonable(init)
        sd = model.state_dict() if isinstance(model, torch.nn.Module) else {}
        reply["state_names"] = list(sd.keys())
        tensors = [v for v in sd.values()]
    return reply, tensors


def _jsonable(x):
    if isinstance(x, (bool, int, str)) or x is None:
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    raise TypeError(f"get_init_inputs() returned a {type(x).__name__}; only numbers, strings and lists are supported")


def cmd_load_state(h, tensors):
    model = STATE["model"]
    if not isinstance(model, torch.nn.Module):
        return {"ok": True, "copied": 0}, []
    own = model.state_dict()
    copied = 0
    with torch.no_grad():
        for name, t in zip(h["names"], tensors):
            if name in own and own[name].shape == t.shape and own[name].dtype == t.dtype:
                own[name].copy_(t.to(own[name].device))
                copied += 1
    return {"ok": True, "copied": copied}, []


VARIANTS = ("normal", "scaled", "uniform", "heavy", "small")


class _VariedRandom:
    """While get_inputs() runs, torch's random sources draw from another distribution: the variant changes what
    torch.randn / randn_like (any real) and torch.rand / rand_like ([0, 1)) return, so whatever get_inputs does
    with them afterwards (triu, abs, softmax, A @ A.T, index ranges) still holds: the inputs keep the task's
    structure while their values are scaled and shifted, uniform, heavy-tailed or tiny. Integer draws
    (randint, randperm) are left alone."""

    def __init__(self, variant: str, g: torch.Generator):
        self.variant, self.g = variant, g
        u = lambda lo, hi: float(torch.empty(()).uniform_(lo, hi, generator=g))  # noqa: E731
        self.scale, self.shift = u(0.1, 10.0), u(-2.0, 2.0)

    def normal(self, x: torch.Tensor) -> torch.Tensor:
        v = self.variant
        if v == "scaled":
            return x * self.scale + self.shift
        if v == "uniform":
            return torch.rand(x.shape, generator=self.g, dtype=x.dtype).to(x.device) * 4 - 2
        if v == "heavy":
            u = torch.rand(x.shape, generator=self.g, dtype=x.dtype).clamp_min(0.05).to(x.device)
            return x / u.sqrt()
        if v == "small":
            return x * 1e-3
        return x

    def unit(self, x: torch.Tensor) -> torch.Tensor:
        v = self.variant
        if v == "scaled":
            return x ** (1.0 / max(self.scale, 0.2))  # still in [0, 1), mass moved toward 0 or 1
        if v == "heavy":
            return x ** 4
        if v == "small":
            return x * 1e-3
        return x

    def __enter__(self):
        self.saved = {n: getattr(torch, n) for n in ("randn", "randn_like", "rand", "rand_like")}
        if self.variant == "normal":
            return self
        wrap = lambda f, post: (lambda *a, **k: _float_post(f(*a, **k), post))  # noqa: E731
        torch.randn = wrap(self.saved["randn"], self.normal)
        torch.randn_like = wrap(self.saved["randn_like"], self.normal)
        torch.rand = wrap(self.saved["rand"], self.unit)
        torch.rand_like = wrap(self.saved["rand_like"], self.unit)
        return self

    def __exit__(self, *exc):
        for n, f in self.saved.items():
            setattr(torch, n, f)


def _float_post(x, post):
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        with torch.no_grad():
            y = post(x)
        return y.requires_grad_(x.requires_grad) if y is not x else y
    return x


def cmd_inputs(h, _tensors):
    """Reference worker only: fresh input sets from get_inputs() under the given seeds, each drawn with one of
    the VARIANTS of torch's random sources (see _VariedRandom)."""
    module = STATE["module"]
    out, counts = [], []
    for seed, variant in zip(h["seeds"], h["variants"]):
        torch.manual_seed(seed)
        g = torch.Generator().manual_seed(seed + 1)
        with _VariedRandom(variant, g):
            inputs = module.get_inputs()
        ts = [x if isinstance(x, torch.Tensor) else torch.tensor(x) for x in inputs]
        out.extend(t.detach().cpu() for t in ts)
        counts.append(len(ts))
    return {"ok": True, "counts": counts}, out


def cmd_run(h, tensors):
    """Run forward on each input set; outputs of every call come back (so all work happens inside the clock)."""
    model = STATE["model"]
    dev = _device()
    sets, i = [], 0
    for c in h["counts"]:
        sets.append([t.to(dev) for t in tensors[i:i + c]])
        i += c
    outs, structure = [], []
    with torch.no_grad():
        for inputs in sets:
            res = _flatten_outputs(model(*inputs))
            STATE["last_out"] = res
            structure.append(len(res))
            outs.extend(res)
    _sync()
    return {"ok": True, "structure": structure, "ext_builds": STATE["ext_builds"],
            "ext_failures": STATE["ext_failures"]}, outs


def cmd_echo(h, tensors):
    """Transport calibration: send the tensors' device round trip and bytes back, doing no model work."""
    dev = _device()
    moved = [t.to(dev) for t in tensors]
    _sync()
    outs = [torch.zeros(s, dtype=getattr(torch, d), device=dev) for s, d in zip(h["out_shapes"], h["out_dtypes"])]
    _sync()
    return {"ok": True, "moved": len(moved)}, outs


def cmd_bandwidth(h, _tensors):
    """Device memory bandwidth (bytes read + written per second) from a large device-to-device copy."""
    dev = _device()
    if dev.type != "cuda":
        return {"ok": True, "bytes_per_s": None}, []
    a = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        b.copy_(a)
    end.record()
    torch.cuda.synchronize()
    secs = start.elapsed_time(end) / 1000
    return {"ok": True, "bytes_per_s": 2 * a.numel() * 10 / secs, "device_name": torch.cuda.get_device_name(dev)}, []


def _structure(xs: list[torch.Tensor]) -> dict:
    """Matrix structure every sample of an input shares (triangular, strictly triangular, symmetric in its last
    two dims): timing inputs are generated with it, so a candidate that relies on the task's input contract (an
    upper-triangular product) is timed on inputs that honour it."""
    if xs[0].dim() < 2 or not xs[0].numel():
        return {}
    st: dict = {}
    for name, fn, ds in (("triu", torch.triu, (1, 0)), ("tril", torch.tril, (-1, 0))):
        for d in ds:
            if all(torch.equal(t, fn(t, d)) for t in xs):
                st[name] = d
                break
    if xs[0].shape[-1] == xs[0].shape[-2] and all(
            torch.allclose(t, t.transpose(-1, -2), rtol=1e-5, atol=1e-6 * float(t.abs().max())) for t in xs):
        st["sym"] = True
    return st


def _apply_structure(x: torch.Tensor, t: dict) -> torch.Tensor:
    if "triu" in t:
        x.triu_(t["triu"])
    if "tril" in t:
        x.tril_(t["tril"])
    if t.get("sym"):
        x = (x + x.transpose(-1, -2)) * 0.5
    return x


def _input_template(module) -> list[dict]:
    """Shapes, dtypes and value ranges of get_inputs(), from a few samples: timing rounds regenerate inputs
    on the device from a seed with the same shapes and ranges (no host transfer inside the clock)."""
    samples = []
    for seed in (1, 2, 3):
        torch.manual_seed(seed)
        samples.append(module.get_inputs())
    out = []
    for i, x in enumerate(samples[0]):
        if not isinstance(x, torch.Tensor):
            out.append({"kind": "const", "value": _jsonable(x)})
            continue
        xs = [s[i] for s in samples]
        dtype = str(x.dtype).removeprefix("torch.")
        if x.dtype == torch.bool:
            out.append({"kind": "bool", "shape": list(x.shape), "dtype": dtype})
        elif x.is_floating_point():
            lo = min(float(t.min()) for t in xs) if x.numel() else 0.0
            hi = max(float(t.max()) for t in xs) if x.numel() else 1.0
            std = float(torch.stack([t.float().std() for t in xs]).mean()) if x.numel() > 1 else 1.0
            mean = float(torch.stack([t.float().mean() for t in xs]).mean()) if x.numel() else 0.0
            out.append({"kind": "float", "shape": list(x.shape), "dtype": dtype, "nonneg": lo >= 0, "lo": lo,
                        "hi": hi, "std": std, "mean": mean, **_structure(xs)})
        else:
            lo = min(int(t.min()) for t in xs) if x.numel() else 0
            hi = max(int(t.max()) for t in xs) if x.numel() else 1
            out.append({"kind": "int", "shape": list(x.shape), "dtype": dtype, "lo": lo, "hi": hi + 1})
    return out


def _generate(template: list[dict], seed: int, dev: torch.device, k: int = 1) -> list[list]:
    """k input sets from one round seed: each template tensor is drawn once as a [k, *shape] batch (a few
    kernels per round instead of per call), then split into per-call views."""
    return _rows(_generate_columns(template, seed, dev, k), k)


def _rows(columns: list, k: int) -> list[list]:
    """Per-call input sets from _generate_columns' columns (views of the batches; constants repeated)."""
    columns = [list(c.unbind(0)) if isinstance(c, torch.Tensor) else c for c in columns]
    return [list(row) for row in zip(*columns)] if columns else [[] for _ in range(k)]


def _generate_columns(template: list[dict], seed: int, dev: torch.device, k: int) -> list:
    """One column per template entry: a [k, *shape] tensor drawn from ``seed``, or k copies of a constant."""
    g = torch.Generator(device=dev).manual_seed(seed)
    columns: list = []
    for t in template:
        if t["kind"] == "const":
            columns.append([t["value"]] * k)
            continue
        dtype = getattr(torch, t["dtype"])
        shape = [k, *t["shape"]]
        if t["kind"] == "bool":
            x = torch.rand(shape, generator=g, device=dev) < 0.5
        elif t["kind"] == "int":
            x = torch.randint(t["lo"], max(t["hi"], t["lo"] + 1), shape, generator=g, device=dev, dtype=dtype)
        elif dev.type == "cpu":
            x = _cheap_floats(t, k, g).to(dtype)
        elif t["nonneg"]:
            span = max(t["hi"] - max(t["lo"], 0.0), 1e-6)
            x = torch.rand(shape, generator=g, device=dev).mul_(span).add_(max(t["lo"], 0.0)).to(dtype)
        else:
            # Uniform with the template's mean and std: fresh values at a fraction of randn's cost on CPU.
            x = torch.rand(shape, generator=g, device=dev).sub_(0.5).mul_(3.4641016 * max(t["std"], 1e-6))
            x = x.add_(t["mean"]).to(dtype)
        if t["kind"] == "float":
            x = _apply_structure(x, t)
        columns.append(x)
    return columns


def _cheap_floats(t: dict, k: int, g: torch.Generator) -> torch.Tensor:
    """CPU timing inputs at a tenth of torch.rand's cost (the CPU generator costs ~6 ns a value, more than many
    forward calls): x = pool[off : off + n] * tile(r) per call, where pool is the evaluation's long U(-1, 1)
    buffer, off a fresh random offset and r a fresh U(-1, 1) vector of <= 4096 values, then scaled to the
    template's mean and std (or its [lo, hi] range when non-negative). The fresh r and offset per call keep the
    values unpredictable and rule out precomputing anything from the pool."""
    n = max(math.prod(t["shape"]), 1)
    m = min(n, 4096)
    pool = _pool(n)
    key = ("inbuf", id(t), k)  # reused across rounds: fresh 32 MB+ allocations page-fault on every round
    out = STATE.get(key)
    if out is None:
        out = STATE[key] = torch.empty(k, n)
    offs = torch.randint(0, DIGEST_WINDOW, (k,), generator=g).tolist()
    rs = torch.rand(k, m, generator=g).mul_(2).sub_(1)
    lo = max(t["lo"], 0.0)
    rs.mul_(max(t["hi"] - lo, 1e-6) if t["nonneg"] else 3.0 * max(t["std"], 1e-6))  # U(-1,1)^2 has std 1/3
    q = (n // m) * m
    for i in range(k):
        torch.mul(pool[offs[i]:offs[i] + q].view(-1, m), rs[i], out=out[i, :q].view(-1, m))
        if q < n:
            torch.mul(pool[offs[i] + q:offs[i] + n], rs[i, :n - q], out=out[i, q:])
    if t["nonneg"]:
        out.abs_()
        if lo:
            out.add_(lo)
    elif t["mean"]:
        out.add_(t["mean"])
    return out.view(k, *t["shape"])


def _pool(n: int) -> torch.Tensor:
    key = ("pool", n)
    if key not in STATE:
        g = torch.Generator().manual_seed((STATE.get("seed", 0) * 7_000_003 + n) % (2**62))
        STATE[key] = torch.rand(n + DIGEST_WINDOW, generator=g).mul_(2).sub_(1)
    return STATE[key]


DIGEST_BATCH = 1 << 22  # outputs of a round digested in one batched pass when calls x elements stay below this
DIGEST_WINDOW = 65536  # random offsets per call into the evaluation's weight buffer; period of the round's weights


def _digest_weights(n: int, dev: torch.device) -> torch.Tensor:
    """The evaluation's long weight buffer for outputs of n elements: U(-1, 1), n + DIGEST_WINDOW values, drawn
    once per evaluation (from the evaluation's seed) because a fresh n-long draw per round costs more than many
    forward calls on a CPU."""
    key = ("dbuf", n, dev.type)
    if key not in STATE:
        g = torch.Generator(device=dev).manual_seed((STATE.get("seed", 0) * 1_000_003 + n) % (2**62))
        STATE[key] = torch.rand(n + DIGEST_WINDOW, generator=g, device=dev).mul_(2).sub_(1)
    return STATE[key]


def _scratch(n: int, dtype: torch.dtype, dev: torch.device) -> torch.Tensor:
    """A reused buffer for the digest's products (fresh allocations page-fault on every call on a CPU)."""
    key = ("scratch", dtype, dev.type)
    buf = STATE.get(key)
    if buf is None or buf.numel() < n:
        buf = STATE[key] = torch.empty(n, dtype=dtype, device=dev)
    return buf[:n]


def _digest_round(outs: list[list[torch.Tensor]], dseed: int) -> list[list[float]]:
    """Per call and output: [||x||, w . x] with a weight on EVERY element, w_e = F[off + e] * r[e mod m]: F is the
    evaluation's long random buffer (read at a fresh random offset per call) and r a fresh random vector of
    m <= 64K values per round (both U(-1, 1)). A random weighting of all elements cannot be matched from a
    subset or sampled positions of the output, and the fresh r and offsets rule out precomputing W^T w for a
    Linear layer. Three read passes per output; one host copy per round. The parent compares these with the
    reference's digests for the same inputs."""
    if not outs or not outs[0]:
        return [[] for _ in outs]
    dev = outs[0][0].device
    g = torch.Generator(device=dev).manual_seed(dseed % (2**62))
    pick = random.Random(dseed)

    def prep(x: torch.Tensor) -> torch.Tensor:
        x = x.detach()
        if type(x) is not torch.Tensor:  # reported in the metas (the parent rejects it); digest the data
            x = x.as_subclass(torch.Tensor)
        if x.is_complex():
            x = torch.view_as_real(x)
        x = x.reshape(-1)
        return x if x.dtype in (torch.float32, torch.float64) else x.float()

    vals: list[list[torch.Tensor]] = [[] for _ in outs]
    for j in range(len(outs[0])):
        col = [prep(o[j]) for o in outs]
        n = max(x.numel() for x in col)
        m = min(max(n, 1), DIGEST_WINDOW)
        big = _digest_weights(n, dev)
        r = torch.rand(m, generator=g, device=dev).mul_(2).sub_(1)
        if dev.type == "cuda" and len(col) >= 4 and len(col) * n <= DIGEST_BATCH and all(
                f.numel() == n and f.dtype == col[0].dtype for f in col):
            # Many small outputs (launch-bound tasks with hundreds of calls a round): one batched pass for the
            # round instead of ~5 kernel launches per call; the same weights as the loop below.
            X = torch.stack(col)
            fr, rr = (big, r) if X.dtype == big.dtype else (big.to(X.dtype), r.to(X.dtype))
            # from pinned memory without a host sync: a held digest's stream is still waiting for its GO here
            offs = torch.tensor([pick.randrange(DIGEST_WINDOW) for _ in col]).pin_memory().to(dev, non_blocking=True)
            W = fr.unfold(0, n, 1)[offs] * rr.repeat((n + m - 1) // m)[:n]
            wds, norms = (X * W).sum(1), torch.linalg.vector_norm(X, dim=1)
            for i in range(len(col)):
                vals[i] += [norms[i], wds[i]]
            continue
        for i, f in enumerate(col):
            k = f.numel()
            off = pick.randrange(DIGEST_WINDOW)
            fr, rr = (big, r) if f.dtype == big.dtype else (big.to(f.dtype), r.to(f.dtype))
            t = torch.mul(f, fr[off:off + k], out=_scratch(k, f.dtype, dev))
            q = (k // m) * m
            wd = torch.dot(t[:q].view(-1, m).sum(0), rr) if q else torch.zeros((), dtype=f.dtype, device=dev)
            if q < k:
                wd = wd + torch.dot(t[q:], rr[:k - q])
            vals[i] += [torch.linalg.vector_norm(f), wd]
    flat = torch.stack([v.double() for row in vals for v in row])
    _held_settle()  # a held digest's GPU work ends here, before the host copy waits for it
    flat = flat.cpu().tolist()
    per = 2 * len(outs[0])
    return [flat[i * per:(i + 1) * per] for i in range(len(outs))]


def _metas(res: list[torch.Tensor]) -> list[list]:
    return [[str(o.dtype).removeprefix("torch."), list(o.shape), type(o) is torch.Tensor] for o in res]


def _l2_flush_buffer(dev: torch.device):
    """A buffer twice the size of the GPU's L2: writing it evicts whatever the last call left cached."""
    if dev.type != "cuda":
        return None
    if "flush" not in STATE:
        l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 50 * 2**20) or 50 * 2**20
        STATE["flush"] = torch.empty(2 * l2, dtype=torch.uint8, device=dev)
    return STATE["flush"]


def _probe_latency_s(dev: torch.device) -> float:
    """Host-visible latency of one tiny kernel: a few microseconds on an idle GPU; a time slice or more while
    another process's work is still queued or running on it (contexts time-slice the device)."""
    buf = STATE.get("probe_buf")
    if buf is None:
        buf = STATE["probe_buf"] = torch.zeros(1, device=dev)
    t0 = _perf()
    buf.add_(1)
    _sync()
    return _perf() - t0


def cmd_quiesce(h, _tensors):
    """Before each timed span (both workers; the other side is frozen or idle): wait, up to ``limit_s``, until a
    tiny kernel runs at idle latency (``busy_s``), so GPU work the other side left queued (a frozen process's
    kernels keep running) drains before this side's clock starts instead of slowing it; this also moves the
    GPU's context switch off the clock. The waits are reported. ``spin_s``: after replying, busy-poll the
    channel that long for the ``go`` that follows (no scheduler wake-up inside the timed span)."""
    dev = _device()
    STATE["spin_next"] = float(h.get("spin_s") or 0.0)
    if dev.type != "cuda":
        return {"ok": True, "probe_s": 0.0, "waited_s": 0.0}, []
    limit_s, busy_s = float(h.get("limit_s", 2.0)), float(h.get("busy_s", 0.0005))
    # Back-to-back probes (version 10), the wait as fine as one probe: a sleep between them (200 us before) jumped a
    # wait just over busy_s by the VM's wake-up time (0.06-0.5 ms; on the H100 the waits after a block's digests
    # were 250-350 us, at that threshold), which the held clock's drain check compares between the sides.
    t_start = _perf()
    lat = first = _probe_latency_s(dev)
    probes = 1
    while lat > busy_s and _perf() - t_start < limit_s:
        lat = _probe_latency_s(dev)
        probes += 1
    return {"ok": True, "probe_s": lat, "waited_s": _perf() - t_start, "first_s": first, "probes": probes}, []


def _host_bytes(outs) -> int:
    """What a block's outputs took in host memory, plus its largest output (a call's temporaries): the heap a
    block of the same size needs."""
    sizes = [t.numel() * t.element_size() for o in outs for t in (o if isinstance(o, (tuple, list)) else [o])
             if isinstance(t, torch.Tensor) and t.device.type == "cpu"]
    return sum(sizes) + max(sizes, default=0)


PREFAULT_CHUNK = 8 << 20  # below the 32 MB mmap threshold (sandbox.scrubbed_env): these come from the heap


def _prefault(nbytes: int) -> None:
    """CPU, harness time: touch ``nbytes`` of free heap and free it again (it stays in the heap: the trim
    threshold is 1 GB), so the block's outputs land on pages already faulted in. On a CPU VM a page's first touch
    costs ~10 us: a span whose outputs grew the heap ran 2-4x longer (4,096-40,960 faults in 10 ms spans), in the
    candidate's early blocks and now and then later, as the staged inputs shifted the heap's layout."""
    chunks = []
    while nbytes > 0:
        n = min(PREFAULT_CHUNK, nbytes)
        chunks.append(torch.ones(n, dtype=torch.uint8))
        nbytes -= n
    del chunks


def cmd_stage(h, _tensors):
    """Timing block, phase 1 (harness, outside any timed span): draw ``k`` input sets on the device from the
    block's seed (one batched draw per input), evict the L2 once, synchronise. The parent times this phase in
    both workers and charges the candidate whatever it spends here beyond the reference (work done while it
    already knows the inputs). k=0 stages nothing: a ``go`` then measures the fixed cost of an empty timed span."""
    dev = _device()
    k = int(h["k"])
    # The previous block's sets and outputs go first: generating beside them held two blocks at once (twice the
    # memory the parent budgets for a block; the reference was OOM-killed in a 2 GB container).
    prev = _host_bytes(STATE.get("round_outs") or []) if dev.type == "cpu" else 0
    STATE["staged"], STATE["round_outs"] = [], []
    _held_begin(h)
    if h.get("replay"):
        # EvalConfig.cuda_graphs: the fresh values go into the buffers the captured graphs read (cmd_capture);
        # the same copies on both sides, in this parent-timed phase
        G = _graphs(k=k)
        for dst, src in zip(G["cols"], _generate_columns(STATE["template"], int(h["seed"]), dev, k)):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        STATE["staged"] = G["sets"]
    else:
        STATE["staged"] = _generate(STATE["template"], int(h["seed"]), dev, k) if k else []
    STATE["next"] = 0
    if prev:
        _prefault(prev)
    flush = _l2_flush_buffer(dev)
    if flush is not None:
        flush.zero_()
    _sync()
    return {"ok": True, "queued_s": STATE.pop("held_queued_s", None)}, []


def cmd_go(h, _tensors):
    """Timing block, phase 2, the only spans the score uses: the next ``n`` staged input sets through forward,
    then a device-wide synchronisation. Nothing else runs here (no input generation, cache flush, digest or
    timer), so the parent's clock around this command is the model's time plus one round trip that both workers
    share. Python's cyclic garbage collector is off meanwhile (both workers): a collection landing in one side's
    timed span and not the other's was a source of outlier rounds."""
    model = STATE["model"]
    sets = STATE.get("staged") or []
    i = STATE.get("next", 0)
    n = int(h.get("n", len(sets) - i))
    batch = sets[i:i + n]
    STATE["next"] = i + len(batch)
    outs = STATE.setdefault("round_outs", [])
    device_clock = h.get("clock") == "device"  # EvalConfig.clock
    on_gpu = device_clock and _device().type == "cuda" and _cuda_event_base is not None and _cuda_sleep is not None
    held = h.get("held") is not None and _device().type == "cuda"  # EvalConfig.clock = "held"
    gc.disable()
    try:
        if held:
            _held_begin(h)
        elif on_gpu:
            # A spin kernel holds the stream while the host queues the n calls; the events after the spin and
            # after the calls time the GPU's own work (nvbench's blocking kernel): the host's dispatch speed,
            # which moved launch-bound ratios by 20-50% between seconds on the H100 VM, is off this clock as
            # long as the queueing ends within the spin (queued_s tells; a starved GPU waited for the host).
            # c blocks (cudaEventBlockingSync): the worker sleeps until the calls are done instead of spinning, so
            # its CPU time in the span (which the parent reads from the kernel) is its host work: queueing, and
            # whatever else it did while the spin held the GPU.
            a, b, c = _event(), _event(), _event(blocking=True)
            cycles = max(1000, int(float(h.get("device_spin_s") or 0.0) / _spin_rate()))
            _record(a)
            _cuda_sleep(cycles)
            _record(b)
        t0 = _perf()
        if h.get("replay") and batch:
            # EvalConfig.cuda_graphs: one replay of the graph captured over exactly these buffers (cmd_capture)
            G = _graphs()
            j, n_g = i // G["k"], G["k"]
            if sets is not G["sets"] or i % n_g or len(batch) != n_g or j >= len(G["graphs"]):
                raise RuntimeError(f"a replayed span must be one captured graph's {n_g} calls (calls {i}..{i + n})")
            G["graphs"][j].replay()
            outs.extend(G["outs"][j])
        else:
            with torch.no_grad():
                for inputs in batch:
                    outs.append(model(*inputs))
        queued = _perf() - t0
        if on_gpu:
            _record(c)
            c.synchronize()
        _sync()
        own = _perf() - t0
    finally:
        gc.enable()
    reply = {"ok": True, "n": len(batch)}
    if held:
        reply.update(queued_s=STATE.pop("held_queued_s", queued))
    elif on_gpu:
        reply.update(dev_s=b.elapsed_time(c) / 1e3, spin_done_s=a.elapsed_time(b) / 1e3, queued_s=queued)
    elif device_clock:  # no GPU: the worker's own clock around the calls and the sync (no round trip, no wake-up)
        reply.update(dev_s=own, spin_done_s=0.0, queued_s=queued)
    return reply, []


def _graphs(k: int | None = None) -> dict:
    G = STATE.get("graphs")
    if not G:
        raise RuntimeError("replay asked for, but no CUDA graphs were captured")
    if k is not None and k != G["k"] * len(G["graphs"]):
        raise RuntimeError(f"staging {k} sets for graphs captured over {G['k'] * len(G['graphs'])}")
    return G


def cmd_capture(h, _tensors):
    """EvalConfig.cuda_graphs (CUDA): capture ``spans`` CUDA graphs of ``k`` forward calls each, over input
    buffers that every later replayed block's staging refills with fresh values (``stage`` with ``replay``).
    Captured before any timed values exist (the buffers hold throwaway values from ``seed``), so nothing computed
    here can be an answer; each replay's outputs are digested and audited like eager ones. A model that cannot
    be captured (a sync or host read in forward, an unsupported op) replies graph: False with the reason, and
    the evaluation stays eager on both sides. Outside every clock."""
    dev = _device()
    STATE["graphs"] = None
    STATE["staged"], STATE["round_outs"] = [], []
    k, spans = int(h["k"]), int(h["spans"])
    if dev.type != "cuda":
        return {"ok": True, "graph": False, "why": "not a CUDA device"}, []
    model = STATE["model"]
    cols = _generate_columns(STATE["template"], int(h["seed"]), dev, k * spans)
    sets = _rows(cols, k * spans)
    graphs, outs, pool = [], [], None
    t0 = _perf()
    try:
        with torch.no_grad():
            # torch's recipe: a few eager calls on a side stream first (lazy handles, autotuning, workspaces)
            side = torch.cuda.Stream()
            side.wait_stream(_current_stream())
            with torch.cuda.stream(side):
                for x in sets[:2]:
                    model(*x)
            _current_stream().wait_stream(side)
            _cuda_sync()
            for j in range(spans):
                g = torch.cuda.CUDAGraph()
                # one memory pool for the block's graphs (replayed in capture order, never at once)
                with torch.cuda.graph(g, pool=pool):
                    o = [model(*x) for x in sets[j * k:(j + 1) * k]]
                pool = g.pool()
                graphs.append(g)
                outs.append(o)
            _cuda_sync()
    except Exception as e:  # noqa: BLE001 - not capturable: eager timing on both sides (the parent decides)
        del graphs, outs
        _cuda_sync()  # a context broken by the attempt fails here, as an error of this worker
        return {"ok": True, "graph": False, "why": f"{type(e).__name__}: {e}"[:400]}, []
    STATE["graphs"] = {"graphs": graphs, "outs": outs, "cols": cols, "sets": sets, "k": k}
    return {"ok": True, "graph": True, "capture_s": _perf() - t0}, []


def cmd_digest(h, _tensors):
    """Timing block, phase 3 (harness, after the clock): the structure, dtype and shape of every output of the
    block, and digests of the calls named in ``calls`` (a random sample the parent draws only now; every call
    when absent) with weights from a seed sent only now. The parent times this phase too (work deferred past the
    timed spans lands here and is charged) and compares the digests with the reference's for the same inputs."""
    STATE["staged"] = []
    _held_begin(h)
    outs = [_flatten_outputs(o) for o in STATE.get("round_outs") or []]
    STATE["round_outs"] = outs
    if outs:
        STATE["last_out"] = outs[-1]
    calls = h.get("calls")
    chosen = outs if calls is None else [outs[int(c)] for c in calls]
    digests = _digest_round(chosen, int(h["dseed"]))
    _sync()
    return {"ok": True, "digests": digests, "structure": [len(r) for r in outs],
            "metas": [_metas(r) for r in outs], "calls": calls, "queued_s": STATE.pop("held_queued_s", None)}, []


def cmd_fetch(h, _tensors):
    """Audit, after the clock stopped: the full outputs of call ``index`` of the last timed round, which the
    parent compares elementwise with the reference's outputs for the same inputs."""
    outs = STATE.get("round_outs") or []
    i = int(h["index"])
    if not 0 <= i < len(outs):
        raise IndexError(f"no output for call {i} of the last round (it had {len(outs)})")
    return {"ok": True, "structure": [len(outs[i])]}, [t.detach() for t in outs[i]]


def cmd_probe(h, _tensors):
    """Reference worker, before each timing block (diagnostic, outside every clock): how fast this core runs fixed
    work now. ``py_us``: a fixed pure-Python loop (interpreter speed on the timing core); on CUDA ``launch_us``: one
    tiny kernel launch (a 1-element add, 32 launches and a sync, per launch): the cost that sets a launch-bound
    reference's time. Best of 3 each. On the H100 VM a launch-bound reference's level moved 1.2-1.7x for seconds
    with the SM clock at its maximum; this says whether the host's speed moved with it."""
    dev = _device()
    py = []
    for _ in range(3):
        t0 = _perf()
        x = 0
        for i in range(20000):
            x += i
        py.append(_perf() - t0)
    out = {"ok": True, "py_us": round(min(py) * 1e6, 2)}
    if dev.type == "cuda":
        a = STATE.get("probe_buf")
        if a is None:
            a = STATE["probe_buf"] = torch.zeros(1, device=dev)
        ln = []
        for _ in range(3):
            _sync()
            t0 = _perf()
            for _ in range(32):
                a.add_(1.0)
            _sync()
            ln.append((_perf() - t0) / 32)
        out["launch_us"] = round(min(ln) * 1e6, 3)
    return out, []


def cmd_spin(h, _tensors):
    """A prelude to a timed span: reply, then busy-poll the channel for up to ``spin_s`` (the worker stays on its
    core, hot, while the parent freezes or thaws the other side before the span)."""
    STATE["spin_next"] = float(h.get("spin_s") or 0.0)
    return {"ok": True}, []


HANDLERS = {"sem": cmd_sem, "holder": cmd_holder, "hold": cmd_hold, "held": cmd_held,
            "probe": cmd_probe, "spin": cmd_spin, "warm": cmd_warm, "load": cmd_load,
            "load_state": cmd_load_state, "inputs": cmd_inputs, "run": cmd_run,
            "stage": cmd_stage, "go": cmd_go, "capture": cmd_capture, "digest": cmd_digest, "quiesce": cmd_quiesce,
            "fetch": cmd_fetch,
            "echo": cmd_echo, "bandwidth": cmd_bandwidth}


def main() -> None:
    fd_in, fd_out = int(sys.argv[1]), int(sys.argv[2])
    os.dup2(2, 1)  # whatever the candidate prints goes to the log, never onto the protocol channel
    chan = Channel(fd_in, fd_out)
    while True:
        header, tensors = chan.recv(spin_s=STATE.pop("spin_next", 0.0))
        cmd = header.get("cmd")
        if cmd == "exit":
            os._exit(0)
        try:
            reply, out = HANDLERS[cmd](header, tensors)
        except BaseException as e:  # report, keep serving (the parent decides)
            kind = type(e).__name__
            if isinstance(e, torch.cuda.OutOfMemoryError) or isinstance(e, MemoryError):
                kind = "OutOfMemory"
            reply = {"ok": False, "kind": kind, "error": f"{type(e).__name__}: {str(e)[:1000]}",
                     "traceback": traceback.format_exc()[-3000:], "ext_failures": STATE["ext_failures"]}
            out = []
        chan.send(reply, out)


if __name__ == "__main__":
    main()
