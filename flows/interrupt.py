"""Ctrl-C (SIGINT) and SIGTERM for ``kernelrl pipeline run``: stop the running step, leave the store consistent,
say how to resume in one line and exit 130, within seconds.

    from flows import interrupt
    interrupt.install(resume="kernelrl pipeline run --recipe smoke --run r1", run="r1")
    token = interrupt.track(lambda grace_s: stop_process_group(proc, grace_s))   # a step runner, per step
    ...
    interrupt.untrack(token)

Why not let KeyboardInterrupt unwind: it lands in whatever the main thread runs (Prefect's engine, a task retry,
the runner's read loop), each of which logs it, reports a crash to the API and waits for Prefect's background
threads (events, logs, the temporary server), which do not stop for it: the command stayed alive for minutes
after a second Ctrl-C with 114 lines of dumps (issue 33). Here the signal handler only starts a shutdown thread;
that thread stops the tracked steps (SIGTERM, then SIGKILL after ``STEP_GRACE_S``), marks this run's stages that
were left ``running`` as failed, marks the Prefect flow run cancelled, stops Prefect's temporary server and
leaves with ``os._exit(130)``. What a killed step leaves is what a crash leaves, which the pipeline resumes
from: checkpoints are complete only when their manifest exists, evaluation jobs of a dead worker are leased and
come back, and every store write is a transaction. A second Ctrl-C skips the waiting (SIGKILL, exit at once).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

EXIT_INTERRUPTED = 130  # 128 + SIGINT: what shells report for a command ended by Ctrl-C
# SIGTERM to SIGKILL for a step: steps save nothing on SIGTERM (a killed step resumes from its last checkpoint),
# so waiting longer only delays the prompt; a few seconds lets a container's init pass the signal on.
STEP_GRACE_S = 3.0
# Upper bound on the whole shutdown (steps, store, Prefect API, temporary server): past it we leave anyway.
SHUTDOWN_LIMIT_S = 12.0
# A second Ctrl-C still marks the interrupted stages (one store transaction) for at most this long before leaving.
MARK_LIMIT_S = 3.0
PREFECT_CALL_S = 2.0  # the cancel call to the Prefect API is a courtesy for its UI: never wait long for it

_lock = threading.Lock()
_stops: dict[int, Callable[[float], None]] = {}
_next = 0
_started = threading.Event()
_said = threading.Event()  # the one line is out: a second Ctrl-C waits briefly for it rather than leave silently
_previous: dict[int, Any] = {}
_state: dict[str, Any] = {"resume": "", "run": None, "flow_run_id": None, "stage": None}


def interrupted() -> bool:
    """True once Ctrl-C (or SIGTERM) was received: runners start no new step then."""
    return _started.is_set()


def track(stop: Callable[[float], None], stage: str | None = None) -> int:
    """Register a running step's ``stop(grace_s)``; returns a token for ``untrack``. A step started after the
    interrupt (a retry racing the shutdown) is stopped at once."""
    global _next
    with _lock:
        _next += 1
        token = _next
        _stops[token] = stop
        if stage:
            _state["stage"] = stage
    if interrupted():
        _call(stop, 0.0)
    return token


def untrack(token: int | None) -> None:
    with _lock:
        _stops.pop(token, None)


def note_flow_run(flow_run_id: Any) -> None:
    """The pipeline flow tells us its run id, so the shutdown can mark it cancelled in the Prefect UI."""
    _state["flow_run_id"] = flow_run_id


def stop_process_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM a step's process group, SIGKILL after ``grace_s`` (the step was started in its own session)."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        if sig == signal.SIGTERM and grace_s <= 0:
            continue
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def install(resume: str, run: str | None = None) -> None:
    """Handle SIGINT and SIGTERM in this (main) thread from now on. ``resume``: the command that resumes."""
    _state.update(resume=resume, run=run)
    for sig in (signal.SIGINT, signal.SIGTERM):
        _previous.setdefault(sig, signal.getsignal(sig))
        signal.signal(sig, _handler)


def uninstall() -> None:
    """The handlers from before ``install`` again (the run ended; tests run the CLI in their own process)."""
    if _started.is_set():
        return
    for sig, previous in list(_previous.items()):
        signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        del _previous[sig]


def _handler(signum, frame) -> None:
    _quiet()
    if _started.is_set():  # a second Ctrl-C: no more waiting for the steps (SIGKILL), but the store still told
        for stop in list(_stops.values()):
            _call(stop, 0.0)
        # The first Ctrl-C's thread may not have reached the store yet (0.2 s apart on a slow host, 2026-11-29):
        # marking is one short transaction, bounded here so a hung store cannot hold the prompt.
        marker = threading.Thread(target=_mark_stages, daemon=True)
        marker.start()
        marker.join(MARK_LIMIT_S)
        _stop_prefect_server(wait_s=0.0)
        _said.wait(1.0)
        _leave()
    _started.set()
    threading.Thread(target=_shutdown, args=(signum,), name="kernelrl-interrupt", daemon=True).start()


def _quiet() -> None:
    """Nothing but our one line may reach the console from the first signal on: the main thread goes on until we
    leave and would log the step's death as a failure (and Prefect its crash), which is what made the 114 lines."""
    logging.disable(logging.CRITICAL)
    # Prefect's log shipper writes "--- Error logging to API ---" and the error straight to stderr (not through
    # logging) when its server is already gone, unless this is off: two extra lines after the one we print (the
    # Ctrl-C test on a fresh clone, 2026-11-27)
    logging.raiseExceptions = False
    # A background thread that dies while we shut down prints its traceback through threading.excepthook: after a
    # second Ctrl-C, aiosqlite's worker thread found its event loop closed and printed 22 lines (CI, 2026-11-29).
    threading.excepthook = lambda args: None
    sys.unraisablehook = lambda unraisable: None


def _shutdown(signum: int) -> None:
    threading.Timer(SHUTDOWN_LIMIT_S, _leave).start()
    stage = _state.get("stage")
    what = f"stage {stage} stopped" if stage and _stops else "stopped"
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    _say(f"interrupted ({name}): {what}; resume with: {_state['resume']}")
    _mute_stderr()
    _said.set()
    stops = list(_stops.values())
    threads = [threading.Thread(target=_call, args=(s, STEP_GRACE_S), daemon=True) for s in stops]
    for t in threads:
        t.start()
    for t in threads:
        t.join(STEP_GRACE_S + 6.0)
    _mark_stages()
    _cancel_flow_run()
    _stop_prefect_server()
    _leave()


def _call(stop: Callable[[float], None], grace_s: float) -> None:
    try:
        stop(grace_s)
    except Exception:  # a step already gone, a container already removed
        pass


def _say(line: str) -> None:
    try:
        sys.stdout.flush()
    except Exception:
        pass
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def _mute_stderr() -> None:
    """After our line, file descriptor 2 goes to /dev/null: what C code, a dying thread or a library writes straight
    to stderr while we stop cannot follow the line (the hooks in ``_quiet`` only cover Python's own reports)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
    except OSError:
        pass


def _mark_stages() -> None:
    """This run's stages left ``running`` by a stopped step become ``failed`` ('interrupted'), so ``pipeline
    status`` tells the truth; the next run re-runs them (a failed stage is never skipped). The stage being run
    when the signal came is marked even when its step had not yet written its record (a step stopped while still
    importing: seen on a slow 2-core host, where 'sft started' preceded the step's own record by over a second)."""
    run = _state.get("run")
    if not run:
        return
    try:
        from kernelrl.config.settings import load_settings
        from kernelrl.step import STAGES
        from kernelrl.store import Store

        store = Store(load_settings().resolved_store_url)
        try:
            current = _state.get("stage")
            for stage in STAGES:
                rec = store.stage_record(run, stage)
                if (rec and rec.get("status") == "running") or (rec is None and stage == current):
                    store.set_stage(run, stage, status="failed", error=f"interrupted; resume with: {_state['resume']}")
        finally:
            store.engine.dispose()
    except Exception:  # the store unreachable: the record stays 'running', which a rerun handles too
        pass


def _cancel_flow_run() -> None:
    flow_run_id = _state.get("flow_run_id")
    if flow_run_id is None:
        return

    def cancel() -> None:
        try:
            from prefect import get_client
            from prefect.states import Cancelled

            with get_client(sync_client=True) as client:
                client.set_flow_run_state(flow_run_id, Cancelled(message="interrupted (Ctrl-C)"), force=True)
        except Exception:
            pass

    t = threading.Thread(target=cancel, daemon=True)
    t.start()
    t.join(PREFECT_CALL_S)


def _stop_prefect_server(wait_s: float = 3.0) -> None:
    """Prefect's temporary server is a child process stopped by an atexit hook, which ``os._exit`` skips: SIGTERM,
    SIGKILL after ``wait_s``."""
    try:
        from prefect.server.api.server import SubprocessASGIServer
    except Exception:
        return
    for server in list(getattr(SubprocessASGIServer, "_instances", {}).values()):
        proc = getattr(server, "server_process", None)
        if proc is None:
            continue
        try:
            if wait_s <= 0:
                raise TimeoutError
            proc.terminate()
            proc.wait(timeout=wait_s)
        except Exception:
            try:
                proc.kill()
            except Exception:
                pass


def _leave() -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(EXIT_INTERRUPTED)

