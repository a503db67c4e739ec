"""The candidate's load (import its module, build ModelNew) under its own short limit.

    wait_for_load(worker, total_s=cfg.compile_timeout_s, load_s=cfg.load_timeout_s)   # then read the reply

Building a candidate may compile CUDA/C++ extensions (``load_inline`` runs ninja and nvcc for minutes), which is
what ``compile_timeout_s`` (600 s) allows. Everything else a load does (the import, ``ModelNew(*init_inputs)``,
moving weights to the device) takes seconds, so a candidate that loops or sleeps at import time waited out the
whole compile allowance (302 s before the evaluation's wall cap stopped it, issue 33) while the same loop in
``forward`` failed in 8 s. Here the load clock runs only while the worker has no child process (no compiler,
no build tool): past ``load_s`` of such time the load is a timeout. A candidate that hides a loop behind a child
process of its own is still bounded by ``total_s``, as before.
"""

from __future__ import annotations

import select
import time

POLL_S = 0.25  # how often the worker's process tree is looked at while it loads (a psutil walk: ~1 ms)


class LoadTimeout(TimeoutError):
    """The load went past a limit; the message says which."""


def _compiling(worker) -> bool:
    """The worker has a child process (ninja, nvcc, a compiler, Inductor's compile workers)."""
    return len(worker.tree()) > 1


def wait_for_load(worker, *, total_s: float, load_s: float, poll_s: float = POLL_S) -> float:
    """Block until the worker's reply is readable; returns the seconds counted against ``load_s``. Raises
    ``LoadTimeout`` past ``load_s`` seconds without a child process, or past ``total_s`` in all. A worker that
    died makes its channel readable (end of file): the caller's read then reports it."""
    start = last = time.monotonic()
    counted = 0.0
    fd = worker.chan.fd_in
    while True:
        ready, _, _ = select.select([fd], [], [], poll_s)
        now = time.monotonic()
        if ready:
            return counted
        if not _compiling(worker):
            counted += now - last
        last = now
        if counted > load_s:
            raise LoadTimeout(f"loading the candidate (import, ModelNew(...)) ran past {load_s:.1f} s outside any "
                              "compiler (load_timeout_s): a loop or a wait at import time or in __init__?")
        if now - start > total_s:
            raise LoadTimeout(f"building ModelNew timed out after {total_s:g} s (compile_timeout_s)")
