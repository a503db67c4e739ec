"""Spare worker processes, started ahead of the evaluations that will take them (the warm path).

Starting a worker costs an interpreter, the torch import and, on a GPU, a device context: about 4 s on an H100
host, more than the timing itself. An evaluation on a CUDA device takes a ready spare for each role (reference
and candidate) when one is waiting and asks for a replacement, which starts in a background thread while the
evaluation runs. A spare has run no task or candidate code (it only imported torch, made the device context
and, for a source that names torch.compile, imported dynamo and inductor: ``with_compiler``); it is used by
exactly one evaluation and closed with it, so nothing a candidate did can reach the next one. Spares are keyed by
everything fixed at process start (role, device, threads, memory limit, pinned core, privilege drop) and by what
their warm-up imports; the compile cache and module file are given at take time (``WorkerProcess.assign``).

    from kernelrl.evaluation.spares import SPARES
    w = SPARES.take("cand", key_kwargs)      # a ready WorkerProcess or None; a replacement starts either way
    SPARES.close_all()                        # at exit (also registered with atexit)

One evaluation and exit (the cold ``kernelrl eval``) starts its own workers this way too, before it imports torch,
so the parent's import and the workers' start overlap (``prestart``): on an H200 host the command spent ~4 s
importing torch and then ~4.5 s waiting for its workers to do the same (bench/results/2026-11-29-h200-cold-eval).
This module and what it imports do not import torch.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time

from kernelrl.evaluation import sandbox
from kernelrl.evaluation.placement import pins, spare_cores
from kernelrl.evaluation.sandbox import WorkerProcess
from kernelrl.evaluation.static import preimports_compiler


STARTERS = 1  # threads that start spares side by side, at first: evaluations raise it (SPARE_STARTERS)

# How long an evaluation waits for a worker ``prestart`` began (its interpreter, torch import, device context):
# longer than any start seen (4-8 s on GPU hosts, ~10 s on the loaded 2-core CPU VM), and a start that fails
# ends the wait at once (the evaluation then starts its own, as without a spare).
PRESTART_WAIT_S = 120.0


def worker_kwargs(cfg, device: str, pinned: bool, holder: bool = False) -> dict:
    """What a worker of an evaluation with ``cfg`` on ``device`` is started with: all that is fixed at process
    start, so also the key a spare is found by. ``pinned``: the evaluation pins its workers to timing cores
    (placement.pins), so they start on the spare cores. ``holder``: the held clock's holder, whose probes and reads
    keep the default (spinning) schedule instead of BLOCKING_SYNC."""
    return dict(device=device, mem_limit_mb=cfg.memory_limit_mb, threads=cfg.threads,
                drop_privileges=sandbox.DROP_PRIVILEGES, cpus=(spare_cores() if pinned else None),
                blocking_sync=sandbox.BLOCKING_SYNC and not holder)


def with_compiler(kw: dict, source: str | None) -> dict:
    """``kw`` for a worker that will run ``source``: a spare for it also imports torch.compile's modules while it
    waits when the source names them (static.preimports_compiler; ``compiler`` is part of the spare's key and
    reaches the worker with its warm-up, not its start)."""
    return dict(kw, compiler=True) if source is not None and preimports_compiler(source) else kw


def held_clock(cfg, device: str) -> bool:
    """EvalConfig.clock = "held" applies on CUDA (kernelrl/evaluation/held.py); elsewhere the parent's clock. Here,
    not in calibrate.py (which imports torch), so prestart can ask it before torch is imported."""
    return cfg.clock == "held" and device.startswith("cuda")


class Spares:
    def __init__(self, per_key: int = 1):
        self.per_key = per_key
        self.starters = STARTERS
        self._lock = threading.Lock()
        self._ready: dict[tuple, list[WorkerProcess]] = {}
        self._starting: dict[tuple, int] = {}
        self._closed = False
        self._todo: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._starting_now: set[WorkerProcess] = set()
        self._paused = 0
        self._unpaused = threading.Event()
        self._unpaused.set()
        self._done = threading.Condition(self._lock)  # a start ended (ready or failed): take(wait_s=...) looks again
        self.prestarted = False  # prestart() ran: evaluations take its workers, waiting while they start

    @staticmethod
    def _key(role: str, kw: dict) -> tuple:
        cpus = kw.get("cpus")
        return (role, kw["device"], kw.get("threads", 1), kw.get("mem_limit_mb"), kw.get("drop_privileges", True),
                tuple(sorted(cpus)) if cpus else None, kw.get("blocking_sync", False), kw.get("compiler", False))

    def take(self, role: str, kw: dict, wait_s: float = 0.0) -> WorkerProcess | None:
        """A ready spare for these settings (or None), and a replacement starting in the background (up to
        ``per_key``). ``wait_s``: while none is ready but one is starting, wait for it up to this long."""
        key = self._key(role, kw)
        deadline = time.monotonic() + wait_s
        with self._lock:
            w = None
            while not self._closed:
                items = self._ready.get(key) or []
                while items and w is None:
                    cand = items.pop(0)
                    w = cand if cand.alive() else None
                    if w is None:
                        cand.close()
                left = deadline - time.monotonic()
                if w is not None or not self._starting.get(key) or left <= 0:
                    break
                self._done.wait(left)
            if self._closed:
                return None
            items = self._ready.get(key) or []
            need = self.per_key - len(items) - self._starting.get(key, 0)
            self._queue(key, role, kw, need)
        return w

    def start(self, role: str, kw: dict) -> None:
        """Start one spare for these settings now, whatever ``per_key`` says (prestart)."""
        with self._lock:
            if not self._closed:
                self._queue(self._key(role, kw), role, kw, 1, starters=max(self.starters, 3))

    def _queue(self, key: tuple, role: str, kw: dict, need: int, starters: int | None = None) -> None:
        """Queue ``need`` starts of this key and make sure enough starter threads run (under the lock)."""
        for _ in range(max(0, need)):
            self._starting[key] = self._starting.get(key, 0) + 1
            self._todo.put((key, role, dict(kw)))
        if need > 0:
            while len(self._threads) < (starters or self.starters):
                # Long-lived starter threads: a worker's parent-death signal (PR_SET_PDEATHSIG) fires when the
                # *thread* that started it ends, so spares started from short-lived threads would die at once.
                # Three of them, so the three roles' replacements start side by side (one after the other they
                # took longer than an evaluation: evaluations found none ready and paid ~5 s).
                t = threading.Thread(target=self._loop, name=f"kernelrl-spares-{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()

    def _loop(self) -> None:
        while True:
            key, role, kw = self._todo.get()
            self._unpaused.wait()
            self._start(key, role, kw)

    def pause(self) -> None:
        """An evaluation is timing: spares being started are stopped (SIGSTOP) and no new start begins until
        every pausing evaluation has called ``resume``. A start is an interpreter, the torch import and a CUDA
        context on the host's other cores and on the GPU, which moved an evaluation's launch-bound ratios when it
        overlapped the timed spans. Ready spares are idle and stay as they are."""
        with self._lock:
            self._paused += 1
            self._unpaused.clear()
            for w in self._starting_now:
                w.freeze()

    def resume(self) -> None:
        with self._lock:
            self._paused = max(0, self._paused - 1)
            if self._paused:
                return
            for w in self._starting_now:
                w.thaw()
            self._unpaused.set()

    def _start(self, key: tuple, role: str, kw: dict) -> None:
        w = None
        kw = dict(kw)
        compiler = kw.pop("compiler", False)  # not a process setting: what its warm-up imports (worker_kwargs)
        try:
            with self._lock:
                w = WorkerProcess(role, cache_dir=None, module_source=None, **kw)
                self._starting_now.add(w)
                if self._paused:
                    w.freeze()
            h, _ = w.request({"cmd": "warm", "device": kw["device"], "compiler": compiler}, timeout=600)
            ok = bool(h.get("ok"))
            w.warmed = h  # what its warm-up did (Session records whether torch.compile's modules were imported)
        except Exception:  # noqa: BLE001 - a spare that failed to start is simply not there
            ok = False
        with self._lock:
            self._starting_now.discard(w)
            if w is not None and w.stopped:
                w.thaw()
            self._starting[key] = max(0, self._starting.get(key, 1) - 1)
            if ok and not self._closed:
                self._ready.setdefault(key, []).append(w)
                w = None
            self._done.notify_all()
        if w is not None:
            w.close()

    def close_all(self) -> None:
        with self._lock:
            self._closed = True
            self._done.notify_all()
            items = [w for ws in self._ready.values() for w in ws]
            self._ready.clear()
        for w in items:
            try:
                w.close()
            except Exception:  # noqa: BLE001
                pass


SPARES = Spares()
atexit.register(SPARES.close_all)


def prestart(cfg, device: str, cand_source: str | None = None) -> None:
    """Start the workers of this process's one evaluation now (reference, candidate and, on the held clock, the
    holder), in the background, as spares: nothing of the task or candidate runs in them until the evaluation
    takes them (``Session.start_ref``, which waits for them while they start). None is replaced after it is
    taken (``per_key`` 0), so a re-verification starts fresh processes as before. Call it before importing torch
    (the cold ``kernelrl eval``): the parent's import then overlaps the workers' own. Workers whose settings turn out
    not to match the evaluation's are closed at exit, unused. ``cand_source``: the candidate's, whose worker then
    imports torch.compile's modules while it waits if the source names them (static.preimports_compiler)."""
    pinned = pins(device)
    kw = worker_kwargs(cfg, device, pinned)
    SPARES.per_key = 0
    SPARES.prestarted = True
    SPARES.start("ref", kw)
    SPARES.start("cand", with_compiler(kw, cand_source))
    if held_clock(cfg, device):
        SPARES.start("holder", worker_kwargs(cfg, device, pinned, holder=True))
