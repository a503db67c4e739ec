"""The code that runs inside a sandboxed worker process (reference or candidate).

    python -m kernelrl.evaluation.worker FD_IN FD_OUT [FD_SIDE [SIDE_MIN_BYTES]]

It answers the parent's commands over the channel (``kernelrl.evaluation.ipc``). Anything here can be patched
by a hostile candidate living in the same process, so the parent trusts nothing it says except the bytes it
returns and *when* they arrive: the parent holds the clock, compares outputs (outputs of 64 MiB+ on a GPU: the
reference's worker, worker_share.py), and never unpickles.
Commands: load, load_state, state (reference only), draw_run (correctness), stage / go / digest (one timing round in
three parent-timed phases), capture (CUDA graphs of the spans' calls, EvalConfig.cuda_graphs), quiesce (reference
only), fetch (audit), compare_kept (reference only), eager (the report-only eager estimate, worker_eager.py), echo,
bandwidth.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import traceback

from kernelrl.evaluation import worker_context

worker_context.begin()  # the device context is made in a thread while torch imports below (worker_context.py)

import torch

from kernelrl.evaluation.held import SEM_DONE, SEM_GO
from kernelrl.evaluation.ipc import Channel
# The helpers that live in modules of their own (one concern each), under the names this module's commands call them
# by: a name looked up here at call time is the one the process runs (a patched one too: tests/redteam/*/).
from kernelrl.evaluation.worker_digest import digest_round, metas as _metas
from kernelrl.evaluation.worker_eager import cmd_eager
from kernelrl.evaluation.worker_inputs import (draw_inputs as _draw_inputs, generate as _generate,
                                               generate_columns as _generate_columns, inputs_module as _inputs_module,
                                               refill_columns as _refill_columns,
                                               restart_generators as _restart_generators, rows as _rows)
from kernelrl.evaluation.worker_memory import (cmd_bandwidth, cmd_trim, forward_transient as _forward_transient,
                                               held_summary as _held_summary)
from kernelrl.evaluation.worker_variation import cmd_rerun
from kernelrl.evaluation.worker_share import cmd_compare_kept, keep_outputs as _keep_outputs, release as _release_kept
from kernelrl.evaluation.worker_load import (cmd_load, cmd_load_state, cmd_state, cmd_warm, flatten_outputs as
                                             _flatten_outputs, rebound_attrs as _rebound_attrs, tensor_attrs as
                                             _tensor_attrs)
from kernelrl.evaluation.worker_state import (STATE, device as _device, host_bytes as _host_bytes,
                                              prefault as _prefault)

_perf = time.perf_counter  # bound before any candidate code runs (which may patch time.perf_counter)


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


def _digest_round(outs: list[list[torch.Tensor]], dseed: int) -> list[list[float]]:
    """worker_digest.digest_round, ending a held digest's GPU work with this module's _held_settle."""
    return digest_round(outs, dseed, settle=_held_settle)


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
        worker_context.wait()  # the context its thread began, before torch makes one
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


def cmd_draw_run(h, _tensors):
    """Correctness (and calibration's warm-up): draw each input set here, on this worker's device, from its seed
    and variant (worker_inputs.draw_inputs; the candidate's worker with the task's get_inputs, sent at load), run
    forward on it, and send the outputs back (``ship`` false: only their shapes and dtypes; ``transient``: the forward's
    temporaries, worker_memory.forward_transient). ``gen_s``: the time spent drawing (sizing the candidate's limit)."""
    model = STATE["model"]
    dev = _device()
    task_inputs = _inputs_module()
    outs, structure, in_bytes, gen_s, transient = [], [], 0, 0.0, 0
    with torch.no_grad():
        for seed, variant in zip(h["seeds"], h["variants"]):
            t0 = _perf()
            inputs = _draw_inputs(task_inputs, int(seed), str(variant), dev)
            gen_s += _perf() - t0
            in_bytes += sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
            out, tb = _forward_transient(lambda xs=inputs: model(*xs), dev if h.get("transient") else None)
            res, transient = _flatten_outputs(out), max(transient, tb)
            structure.append(len(res))
            outs.extend(res)
            del inputs
    _sync()
    reply = {"ok": True, "structure": structure, "in_bytes": in_bytes, "gen_s": gen_s, "transient_bytes": transient,
             "ext_builds": STATE["ext_builds"], "ext_failures": STATE["ext_failures"]}
    if not h.get("ship", True):
        reply["out_meta"] = [[list(o.shape), str(o.dtype).removeprefix("torch.")] for o in outs]
        return reply, []
    return reply, outs


def cmd_echo(h, tensors):
    """Transport calibration: send the tensors' device round trip and bytes back, doing no model work."""
    dev = _device()
    moved = [t.to(dev) for t in tensors]
    _sync()
    outs = [torch.zeros(s, dtype=getattr(torch, d), device=dev) for s, d in zip(h["out_shapes"], h["out_dtypes"])]
    _sync()
    return {"ok": True, "moved": len(moved)}, outs


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
        _refill_columns(G["cols"], STATE["template"], int(h["seed"]), dev, k)
        STATE["staged"] = G["sets"]
    else:
        STATE["staged"] = _generate(STATE["template"], int(h["seed"]), dev, k) if k else []
    STATE["next"] = 0
    _restart_generators(int(h["seed"]))  # both sides draw the same random numbers in this block (why: there)
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
    be captured (a sync or host read in forward, an unsupported op, worker_load.rebound_attrs) replies graph:
    False with the reason, and that side stays eager. Outside every clock."""
    dev, STATE["graphs"] = _device(), None
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
            seen = [_tensor_attrs(model)]  # a forward that rebinds tensor attributes is not replayable (below)
            with torch.cuda.stream(side):
                for x in sets[:2]:
                    model(*x)
                    seen.append(_tensor_attrs(model))
            _current_stream().wait_stream(side)
            _cuda_sync()
            if why := _rebound_attrs(seen):
                return {"ok": True, "graph": False, "why": why}, []
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
    STATE["round_outs"] = outs  # until the next block's staging (the audit fetches from them); nothing is kept
    # beyond it: version 22 kept the last output in STATE["last_out"], read by nothing, and on an 80 GB H100 that
    # 6 GiB output beside the next block's sets ran KernelBench's largest self-pairs out of memory
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
            "load_state": cmd_load_state, "draw_run": cmd_draw_run,
            "stage": cmd_stage, "go": cmd_go, "capture": cmd_capture, "digest": cmd_digest, "quiesce": cmd_quiesce,
            "fetch": cmd_fetch, "eager": cmd_eager,
            "echo": cmd_echo, "bandwidth": cmd_bandwidth, "compare_kept": cmd_compare_kept,
            "state": cmd_state, "trim": cmd_trim, "rerun": cmd_rerun}


def main() -> None:
    fd_in, fd_out = int(sys.argv[1]), int(sys.argv[2])
    side_fd = int(sys.argv[3]) if len(sys.argv) > 3 else None  # large replies' memfd (ipc.SIDE_MIN_BYTES)
    side_min = int(sys.argv[4]) if len(sys.argv) > 4 else None
    os.dup2(2, 1)  # whatever the candidate prints goes to the log, never onto the protocol channel
    chan = Channel(fd_in, fd_out, side_fd=side_fd, side_min_bytes=side_min)
    while True:
        header, tensors = chan.recv(spin_s=STATE.pop("spin_next", 0.0))
        cmd = header.get("cmd")
        if cmd == "exit":
            os._exit(0)
        try:
            if cmd != "compare_kept":
                _release_kept()  # outputs an earlier request kept (worker_share) give their memory back
            reply, out = HANDLERS[cmd](header, tensors)
            if header.get("keep"):
                reply, out = _keep_outputs(header, reply, out)
        except BaseException as e:  # report, keep serving (the parent decides)
            kind = type(e).__name__
            if isinstance(e, torch.cuda.OutOfMemoryError) or isinstance(e, MemoryError):
                kind = "OutOfMemory"
                e = type(e)(f"{str(e)[:700]} [held by the harness: {_held_summary()}]")
            reply = {"ok": False, "kind": kind, "error": f"{type(e).__name__}: {str(e)[:1000]}",
                     "traceback": traceback.format_exc()[-3000:], "ext_failures": STATE["ext_failures"]}
            out = []
        chan.reply(reply, out, {"error": f"{cmd}: an output of forward() could not be read: ",
                                "ext_failures": STATE["ext_failures"]})


if __name__ == "__main__":
    main()
