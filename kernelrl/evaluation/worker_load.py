"""The worker's start and load (inside the worker process, kernelrl/evaluation/worker.py): a spare's warm-up
(``cmd_warm``), loading the task's or the candidate's module and model (``cmd_load``: extension builds watched,
the CUDA context's schedule set first) and the reference's parameters copied into the candidate
(``cmd_load_state``)."""

from __future__ import annotations

import gc
import importlib.util
import os
import sys
import time

import torch

from kernelrl.evaluation import worker_context
from kernelrl.evaluation.worker_inputs import input_template, jsonable
from kernelrl.evaluation.worker_state import STATE, device


def watch_extension_builds() -> None:
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
    if device().type == "cuda":  # Triton compiles lazily, at the first call of a kernel: watch its compiler too
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


def flatten_outputs(out) -> list[torch.Tensor]:
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


def schedule_blocking_sync() -> None:
    """BLOCKING_SYNC (the parent sets KERNELRL_BLOCKING_SYNC for the reference and candidate workers,
    never the holder): before this process's CUDA context exists, give the device's primary context
    CU_CTX_SCHED_BLOCKING_SYNC, so the model's own synchronisations (``.item()``, ``.tolist()``, a copy to the host)
    sleep instead of spinning. Why: under the held clock such a sync waits out the holder's hold, and a spinning
    wait is CPU time, which the host check (held.charges "cpu") cannot tell from host work done while the hold
    kept the GPU: an honest MoE that syncs once a call was charged 30 ms a call (H100, ninth session). The
    harness's own waits sleep already (_held_settle). Once per process; the result is in STATE["sched"]. Where the
    worker's context thread ran (worker_context.py: it set the flag first, the same way), its result is taken."""
    if "sched" in STATE:
        return
    STATE["early_context"] = early = worker_context.wait()  # before any CUDA call of torch's
    if os.environ.get("KERNELRL_BLOCKING_SYNC") != "1":
        return
    if "sched" in early:
        STATE["sched"] = early["sched"]
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
        STATE["sched"] = worker_context.set_blocking_sync(lib, dev)
    except (OSError, AttributeError) as e:
        STATE["sched"] = f"default ({type(e).__name__})"


def cmd_warm(h, _tensors):
    """A spare worker, started ahead of an evaluation (before any task or candidate code exists in it): create the
    device context now, so the evaluation that takes it pays neither the interpreter, the torch import nor this.
    ``compiler``: its source names torch.compile (static.preimports_compiler), so import what ``torch.compile(...)``
    imports too (dynamo, inductor's compile_fx): 6-7 s on an H200 host that the candidate's build paid before."""
    dev = torch.device(h["device"])
    if dev.type == "cuda":
        STATE["device"] = h["device"]
        schedule_blocking_sync()
        torch.cuda.set_device(dev.index or 0)
        torch.zeros(1, device=dev)
        torch.cuda.synchronize()
    compiler_s = None
    if h.get("compiler"):
        t0 = time.monotonic()
        # dynamo imports inductor's config (its compile threads: sandbox.scrubbed_env); compile_fx is the rest of
        # what torch.compile() imports. import_module: an import statement here would make `torch` a local name.
        for name in ("torch._dynamo", "torch._inductor.compile_fx"):
            importlib.import_module(name)
        compiler_s = round(time.monotonic() - t0, 3)
    return {"ok": True, "sched": STATE.get("sched", "default"), "compiler_s": compiler_s,
            "context": STATE.get("early_context")}, []


def cmd_load(h, _tensors):
    if h.get("cache_dir"):  # a spare worker learns its compile cache now (its environment was set before)
        os.environ["TORCH_EXTENSIONS_DIR"] = os.path.join(h["cache_dir"], "torch_extensions")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(h["cache_dir"], "triton")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(h["cache_dir"], "inductor")
    STATE["device"] = h["device"]
    STATE["seed"] = int(h["seed"])
    if device().type == "cuda":
        schedule_blocking_sync()  # before this process's context exists (a spare's was made in cmd_warm)
        torch.cuda.set_device(device().index or 0)
    # Full float32 for both sides: cuDNN's TF32 default would make the reference itself inexact.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    watch_extension_builds()
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
        model = model.to(device())
        model.train(bool(h["train_mode"]))
    STATE["model"] = model
    gc.collect()
    gc.freeze()  # what exists now (torch, the module, the model) is never scanned again: short, rare collections
    reply = {"ok": True, "ext_builds": STATE["ext_builds"], "ext_failures": STATE["ext_failures"],
             "sched": STATE.get("sched", "default")}
    tensors = []
    STATE["template"] = h.get("template")
    STATE["task_source"] = h.get("task_source")  # the candidate's worker: the task's get_inputs (cmd_draw_run)
    STATE["task_module"] = None
    if h["role"] == "ref":
        reply["template"] = STATE["template"] = input_template(module, device())
        reply["init_inputs"] = jsonable(init)
        sd = model.state_dict() if isinstance(model, torch.nn.Module) else {}
        reply["state_names"] = list(sd.keys())
        if sum(v.numel() * v.element_size() for v in sd.values()) >= int(h.get("state_print_min", 1 << 62)):
            reply["state_prints"] = [exact_print(v) for v in sd.values()]  # shipped later, only what differs
        else:
            tensors = [v for v in sd.values()]
    return reply, tensors


PRINT_CHUNK = 1 << 22  # int32 words a step: x * w (|x| < 2^31, w <= 251) summed over a chunk stays below 2^63


def exact_print(t: torch.Tensor) -> list:
    """[dtype, shape, two exact integer sums of the tensor's bytes]: equal for identical bytes on any device, and
    different for different ones but with negligible chance. Reduced on the tensor's own device (the weights of
    a GPU model are not copied to the host to be compared)."""
    x = t.detach().reshape(-1)
    nb = x.numel() * x.element_size()
    raw = x.contiguous().view(torch.uint8) if nb else torch.empty(0, dtype=torch.uint8)
    if nb % 4 == 0 and raw.storage_offset() % 4:  # a view at an odd offset: the same bytes, aligned (a copy)
        raw = raw.clone()
    v = raw.view(torch.int32) if nb % 4 == 0 else raw  # by size alone: equal bytes, equal prints
    s1 = s2 = 0
    for i in range(0, v.numel(), PRINT_CHUNK):
        c = v[i:i + PRINT_CHUNK].to(torch.int64)
        w = torch.arange(i, i + c.numel(), device=c.device, dtype=torch.int64).remainder_(251).add_(1)
        s1 += int(c.sum())
        s2 += int(c.mul_(w).sum())
    return [str(t.dtype).removeprefix("torch."), list(t.shape), s1, s2]


def cmd_state(h, _tensors):
    """Reference: the named tensors of its state (those the candidate's own differ in: session.start_cand)."""
    model = STATE["model"]
    sd = model.state_dict() if isinstance(model, torch.nn.Module) else {}
    names = [n for n in h["names"] if n in sd]
    return {"ok": True, "names": names}, [sd[n] for n in names]


def cmd_load_state(h, tensors):
    """The reference's weights into the candidate's model, by name (same shape and dtype). With ``prints`` (the
    reference's exact prints, a large state): nothing is copied; the reply names the tensors whose own bytes
    differ (``missing``), which the parent then ships. A candidate that misreports only keeps weights of its own,
    which its outputs must still answer for."""
    model = STATE["model"]
    if not isinstance(model, torch.nn.Module):
        return {"ok": True, "copied": 0, "missing": []}, []
    own = model.state_dict()
    if "prints" in h:
        missing = [n for n, p in zip(h["names"], h["prints"])
                   if n in own and [str(own[n].dtype).removeprefix("torch."), list(own[n].shape)] == p[:2]
                   and exact_print(own[n]) != p]
        return {"ok": True, "missing": missing}, []
    copied = 0
    with torch.no_grad():
        for name, t in zip(h["names"], tensors):
            if name in own and own[name].shape == t.shape and own[name].dtype == t.dtype:
                own[name].copy_(t.to(own[name].device))
                copied += 1
    return {"ok": True, "copied": copied}, []


def tensor_attrs(model) -> dict[str, torch.Tensor]:
    """Every plain tensor attribute (not a parameter or a buffer) of ``model`` and its submodules, by dotted name.
    The tensors themselves, not their ids: holding them keeps an id from being reused by a new tensor."""
    mods = model.named_modules() if isinstance(model, torch.nn.Module) else [("", model)]
    out = {}
    for prefix, m in mods:
        try:
            items = list(vars(m).items())
        except TypeError:  # an object without __dict__
            continue
        for name, v in items:
            if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter):
                out[f"{prefix}.{name}" if prefix else name] = v
    return out


def rebound_attrs(seen: list[dict[str, torch.Tensor]]) -> str:
    """Why a model cannot be captured in a CUDA graph, given ``tensor_attrs`` before and after each warm-up call
    (empty when it can): its forward binds a tensor attribute to a new tensor on each call. KernelBench level 3
    33_VanillaRNN does (``self.hidden = tanh(...)``): the graph reads the tensor bound before capture, which is
    freed after it, so a replay read freed memory (``illegal memory access`` on the H200, call 9 of
    bench/results/2026-11-28-h200x4-kernelbench). In-place updates (BatchNorm's running stats) keep the tensor."""
    moved = sorted({n for a, b in zip(seen, seen[1:]) for n, t in a.items() if n in b and b[n] is not t})
    if not moved:
        return ""
    return (f"forward binds tensor attribute(s) {', '.join(moved[:3])} to new tensors on each call: a graph "
            "replay would read memory freed after capture")
