"""Spare worker processes, started ahead of the evaluations that will take them (the warm path).

Starting a worker costs an interpreter, the torch import and, on a GPU, a device context: about 4 s on an H100
host, more than the timing itself. An evaluation on a CUDA device takes a ready spare for each role (reference
and candidate) when one is waiting and asks for a replacement, which starts in a background thread while the
evaluation runs. A spare has run no task or candidate code (it only imported torch and made the device
context); it is used by exactly one evaluation and closed with it, so nothing a candidate did can reach the
next one. Spares are keyed by everything fixed at process start (role, device, threads, memory limit, pinned
core, privilege drop); the compile cache and module file are given at take time (``WorkerProcess.assign``).

    from kernelrl.evaluation.spares import SPARES
    w = SPARES.take("cand", key_kwargs)      # a ready WorkerProcess or None; a replacement starts either way
    SPARES.close_all()                        # at exit (also registered with atexit)
"""

from __future__ import annotations

import atexit
import queue
import threading

from kernelrl.evaluation.sandbox import WorkerProcess


STARTERS = 1  # threads that start spares side by side, at first: evaluations raise it (SPARE_STARTERS)


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

    @staticmethod
    def _key(role: str, kw: dict) -> tuple:
        cpus = kw.get("cpus")
        return (role, kw["device"], kw.get("threads", 1), kw.get("mem_limit_mb"), kw.get("drop_privileges", True),
                tuple(sorted(cpus)) if cpus else None, kw.get("blocking_sync", False))

    def take(self, role: str, kw: dict) -> WorkerProcess | None:
        """A ready spare for these settings (or None), and a replacement starting in the background."""
        key = self._key(role, kw)
        with self._lock:
            if self._closed:
                return None
            items = self._ready.get(key) or []
            w = None
            while items and w is None:
                cand = items.pop(0)
                w = cand if cand.alive() else None
                if w is None:
                    cand.close()
            need = self.per_key - len(items) - self._starting.get(key, 0)
            for _ in range(max(0, need)):
                self._starting[key] = self._starting.get(key, 0) + 1
                self._todo.put((key, role, dict(kw)))
            while need > 0 and len(self._threads) < self.starters:
                # Long-lived starter threads: a worker's parent-death signal (PR_SET_PDEATHSIG) fires when the
                # *thread* that started it ends, so spares started from short-lived threads would die at once.
                # Three of them, so the three roles' replacements start side by side (one after the other they
                # took longer than an evaluation: evaluations found none ready and paid ~5 s).
                t = threading.Thread(target=self._loop, name=f"kernelrl-spares-{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()
        return w

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
        try:
            with self._lock:
                w = WorkerProcess(role, cache_dir=None, module_source=None, **kw)
                self._starting_now.add(w)
                if self._paused:
                    w.freeze()
            h, _ = w.request({"cmd": "warm", "device": kw["device"]}, timeout=600)
            ok = bool(h.get("ok"))
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
        if w is not None:
            w.close()

    def close_all(self) -> None:
        with self._lock:
            self._closed = True
            items = [w for ws in self._ready.values() for w in ws]
            self._ready.clear()
        for w in items:
            try:
                w.close()
            except Exception:  # noqa: BLE001
                pass


SPARES = Spares()
atexit.register(SPARES.close_all)
