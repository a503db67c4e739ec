"""An evaluation worker: claims jobs from the store's queue and evaluates them one at a time on its device.

    kernelrl worker --device cuda:0                 # one per dedicated GPU (`kernelrl workers up --gpus all`)
    kernelrl worker --device cpu --max-jobs 10 --idle-exit-s 30
    kernelrl worker --device cuda:1 --sandbox docker --image kernelrl/evaluator   # one container per candidate

Library: ``Worker(store_or_url, device, evaluate_fn=...).run()``; ``EvalService(local_workers=N)`` runs the same
loop in threads.

- **Leases with heartbeats.** A background thread extends the lease every ``lease_s / 3`` while an evaluation
  runs; a worker that dies stops heart-beating, its lease lapses and another worker claims the job again.
- **Graceful stop.** SIGTERM/SIGINT: the current job is finished if it ends within ``grace_s``, else released
  back to the queue (its sandbox processes are killed); then the worker exits 0.
- **Compile-ahead.** While job k is timed, a small thread pool pre-builds the next queued candidates that use
  ``load_inline``/``cpp_extension`` with ``kernelrl.evaluation.precompile``: the candidate module is imported
  in a sandboxed process (the evaluator's own ``WorkerProcess``, same uid, same scrubbed environment, same
  compile cache), which runs its module-level builds into the shared cache so the timed evaluation finds them
  built. On CUDA workers ``TORCH_CUDA_ARCH_LIST`` is pinned to the
  device's architecture (when unset) so both builds use identical flags and the pre-build never touches the
  GPU. Off on CPU workers: a compiler beside a CPU timing run would perturb it. Triton kernels compile on
  first call and are not pre-built.
- **Re-verification.** A successful result whose speedup is above ``reverify_above`` (or above twice the best
  known for the task on this device type, or any result of a ``purpose='reverify'`` job) is not accepted
  yet: the job waits in status ``verifying`` and a child job is queued that excludes this worker's GPU (its
  UUID; the worker id on CPU) for ``reverify_wait_s``, so another worker of the same device type re-measures
  it; after that window this worker may take it itself, which re-measures in fresh sandbox processes (with a
  single worker of the type, ``reverify_wait_s=0`` does that at once). The lower of the two is kept; when the
  second is more than ``reverify_tolerance`` below the first, outside both intervals and not explained by the
  reference's drift, it is flagged ``reverify-disagreed`` (stats.reverify_verdict); a re-measurement that failed
  scores 0 (``reverify-mismatch``). ``timing.reverify`` records who re-measured (worker, device, GPU UUID) and
  how (``other-gpu``/``other-worker``/``fresh-process``).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from kernelrl.config.devices import device_name
from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation.precompile import BUILD_MARKERS, pin_cuda_arch, precompile
from kernelrl.evaluation.stats import needs_reverify
from kernelrl.evaluation.result import TaskBroken
from kernelrl.store.db import Store
from kernelrl.store.queue import Job, JobQueue

log = logging.getLogger("kernelrl.worker")

REVERIFY_TRIALS = 5  # correctness sets in a re-measurement (the first measurement ran the full count)


def load_evaluate_fn(spec: str | None = None) -> Callable:
    """``module:attr`` of an evaluate function (TESTS ONLY: a fast fake); default (None): the real evaluator."""
    if not spec:
        from kernelrl.evaluation.api import evaluate

        return evaluate
    mod, _, attr = spec.partition(":")
    return getattr(importlib.import_module(mod), attr)


def gpu_uuid_of(device: str) -> str | None:
    """The GPU's UUID ('GPU-...'), the identity re-verification excludes; None on CPU or when unknown."""
    if not device.startswith("cuda"):
        return None
    idx = int(device.split(":")[1]) if ":" in device else 0
    try:
        import torch

        u = str(torch.cuda.get_device_properties(idx).uuid)
        return u if u.startswith("GPU-") else f"GPU-{u}"
    except Exception:
        pass
    try:  # physical index = the idx-th entry of CUDA_VISIBLE_DEVICES, when that lists indices
        vis = os.environ.get("CUDA_VISIBLE_DEVICES")
        phys = vis.split(",")[idx].strip() if vis else str(idx)
        if phys.startswith("GPU-"):
            return phys
        out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader", "-i", phys],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip() or None
    except Exception:
        return None





def config_from_settings(settings: dict[str, Any], device: str) -> EvalConfig:
    names = {f.name for f in dataclasses.fields(EvalConfig)}
    cfg = EvalConfig(**{k: v for k, v in settings.items() if k in names})
    # This worker's device, whatever the submitter had; re-verification is the queue's job, not the evaluator's.
    return dataclasses.replace(cfg, device=device, reverify=False)


def decide_reverify(first: dict[str, Any], second: dict[str, Any], tolerance: float, *, mode: str,
                    who: dict[str, Any]) -> dict[str, Any]:
    """The parent's final result from its first measurement and the re-measurement: the lower of the two, rounded
    toward 1, flagged reverify-disagreed when they disagree (stats.reverify_verdict: agreeing within
    ``tolerance``, within the two measurements' intervals, or the reference's own drift); 0 and reverify-mismatch
    when the re-measurement failed. ``timing.reverify`` says which rule decided and which number was kept."""
    from kernelrl.evaluation.stats import judge_reverify

    s1, s2 = float(first.get("speedup") or 0.0), float(second.get("speedup") or 0.0)
    ok2 = bool(second.get("success", second.get("executable") and second.get("correct")))
    t1 = first.get("timing") or {}
    v, record = judge_reverify(s1, t1, s2, ok2, second.get("timing"), tolerance, mode=mode,
                               second_flags=second.get("flags"), second_error=second.get("error"))
    out = dict(first)
    out["timing"] = {**t1, "reverify": {**record, **who}}
    out["speedup"] = v.kept
    if v.flag:
        flags = list(out.get("flags") or [])
        if v.flag not in flags:
            flags.append(v.flag)
        out["flags"] = flags
    if v.flag == "reverify-mismatch":
        out.update(success=False, error=out.get("error") or f"reverify-mismatch: {v.why}")
    return out


class Worker:
    """One worker on one device. ``store``: a Store or its URL. ``evaluate_fn(task_source, cand_source, cfg)``
    returns an EvalResult (or anything with ``to_dict()``); default: the real evaluator."""

    def __init__(self, store: Store | str, device: str = "cpu", worker_id: str | None = None, lease_s: float = 30.0,
                 evaluate_fn: Callable | None = None, precompile: bool | str = True, *,
                 stop_event: threading.Event | None = None, idle_sleep_s: float = 0.5, max_jobs: int | None = None,
                 idle_exit_s: float | None = None, grace_s: float = 60.0, reverify_wait_s: float = 30.0,
                 sandbox: str = "process", image: str | None = None, owns_process: bool = False,
                 device_type: str | None = None, gpu_uuid: str | None = None):
        self.store = Store(store) if isinstance(store, str) else store
        self.device = device
        self.device_kind = "cuda" if device.startswith("cuda") else "cpu"
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{device}"
        self.device_type = device_type or device_name(device)
        self.gpu_uuid = gpu_uuid or gpu_uuid_of(device)
        self.identity = self.gpu_uuid or self.worker_id  # what a re-verification of our results excludes
        self.queue = JobQueue(self.store, lease_s=lease_s)
        self.lease_s = lease_s
        self.evaluate_fn = evaluate_fn or load_evaluate_fn()
        self.stop = stop_event or threading.Event()
        self.idle_sleep_s = idle_sleep_s
        self.max_jobs = max_jobs
        self.idle_exit_s = idle_exit_s
        self.grace_s = grace_s
        self.reverify_wait_s = reverify_wait_s
        self.sandbox = sandbox
        self.image = image
        self.owns_process = owns_process
        if sandbox == "docker" and (not image or not self.gpu_uuid):
            from kernelrl.errors import ConfigError

            raise ConfigError("--sandbox docker needs --image and a CUDA device (one GPU by UUID per container)")
        # Compile-ahead: on CUDA workers (a CPU timing run must not share its cores with a compiler) or when
        # asked for explicitly with precompile="always"; not in docker mode (builds happen in the container).
        self.precompile = bool(precompile) and sandbox == "process" and (
            self.device_kind == "cuda" or precompile == "always")
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kernelrl-precompile") \
            if self.precompile else None
        self._prebuilt: set[int] = set()  # candidate ids pre-built (or being pre-built) by this worker
        self.precompile_log: list[dict[str, Any]] = []
        self.done = 0
        self.released = 0
        if self.device_kind == "cuda":
            pin_cuda_arch(device)

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        def on_term(signum, frame):
            log.info("worker %s: signal %s, stopping after the current job", self.worker_id, signum)
            self.stop.set()

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)

    def run(self) -> int:
        """Claim and evaluate until stopped (or max_jobs, or idle_exit_s without work). Returns jobs done."""
        idle_since = time.monotonic()
        try:
            while not self.stop.is_set():
                if self.max_jobs is not None and self.done >= self.max_jobs:
                    break
                try:
                    job = self.queue.claim(self.worker_id, self.device_kind, self.lease_s,
                                           device_type=self.device_type, identities=(self.identity,))
                except Exception as e:  # the store is down for longer than its retries: wait, keep serving
                    log.warning("worker %s: claim failed (%s); retrying", self.worker_id, str(e).splitlines()[0])
                    self.stop.wait(max(5.0, self.idle_sleep_s))
                    continue
                if job is None:
                    if self.idle_exit_s is not None and time.monotonic() - idle_since > self.idle_exit_s:
                        break
                    self.stop.wait(self.idle_sleep_s)
                    continue
                try:
                    if self._run_job(job):
                        self.done += 1
                except Exception as e:  # writing the outcome failed: the lease lapses and the job runs again
                    log.warning("worker %s: job %s: %s", self.worker_id, job.id, str(e).splitlines()[0])
                idle_since = time.monotonic()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
            if self.owns_process:
                kill_children()  # pre-build sandboxes still running
        return self.done

    def _abandon(self) -> None:
        """A released job's evaluation is still running: stop what it started (a worker process only)."""
        if self.sandbox == "docker":
            try:
                from kernelrl.evaluation.docker_sandbox import kill_labelled

                kill_labelled(self.worker_id)
            except Exception as e:  # pragma: no cover - the engine is gone: the container's own timeout ends it
                log.warning("worker %s: could not remove its containers: %s", self.worker_id, e)
        if self.owns_process:
            kill_children()

    # -- one job ------------------------------------------------------------------------------------------------
    def _run_job(self, job: Job) -> bool:
        """Evaluate one claimed job; True if it was finished (completed, deferred or failed), False if released."""
        beat_stop = threading.Event()
        lost = threading.Event()

        def beat():
            while not beat_stop.wait(self.lease_s / 3):
                try:
                    if not self.queue.heartbeat(job.id, self.worker_id, self.lease_s):
                        lost.set()
                        log.warning("worker %s: lost the lease of job %s", self.worker_id, job.id)
                        return
                except Exception as e:  # the store is unreachable for a moment: the lease may lapse
                    log.warning("worker %s: heartbeat of job %s failed: %s", self.worker_id, job.id, e)

        hb = threading.Thread(target=beat, name=f"kernelrl-heartbeat-{job.id}", daemon=True)
        hb.start()
        self._compile_ahead(job)
        outcome: dict[str, Any] = {}

        def work():
            try:
                outcome["result"] = self._evaluate(job)
            except BaseException as e:  # a harness failure: recorded, retried while attempts remain
                outcome["error"] = f"{type(e).__name__}: {e}"
                outcome["retry"] = not isinstance(e, TaskBroken)  # the task's own code: the same every time

        t = threading.Thread(target=work, name=f"kernelrl-eval-{job.id}", daemon=True)
        t.start()
        try:
            while t.is_alive():
                t.join(0.1)
                if self.stop.is_set() and t.is_alive():
                    t.join(self.grace_s)  # finish the job if it ends within the grace period...
                    if t.is_alive():  # ...else give it back to the queue
                        self.queue.release(job.id, self.worker_id)
                        self.released += 1
                        log.info("worker %s: released job %s", self.worker_id, job.id)
                        self._abandon()
                        return False
        finally:
            beat_stop.set()
        if "error" in outcome:
            log.warning("worker %s: job %s: %s", self.worker_id, job.id, outcome["error"])
            self.queue.fail(job.id, self.worker_id, outcome["error"], retry=outcome["retry"])
            return True
        self._finish(job, outcome["result"])
        return True

    def _finish(self, job: Job, result: dict[str, Any]) -> None:
        if job.parent_id is not None:
            first = self.queue.pending_result(job.parent_id) or {}
            mode = ("fresh-process" if job.exclude_worker == self.identity
                    else "other-gpu" if self.gpu_uuid else "other-worker")
            who = {"worker": self.worker_id, "device": self.device, "gpu_uuid": self.gpu_uuid, "job_id": job.id,
                   "first_worker": first.get("worker"), "first_gpu_uuid": first.get("gpu_uuid")}
            tol = float(job.settings.get("reverify_tolerance", EvalConfig.reverify_tolerance))
            decided = decide_reverify(first, result, tol, mode=mode, who=who)
            self.queue.complete_reverify(job.id, self.worker_id, result, job.parent_id, decided)
            return
        if self._needs_reverify(job, result):
            self.queue.defer_for_reverify(job.id, self.worker_id, result, exclude=self.identity,
                                          wait_s=self.reverify_wait_s, device_type=self.device_type)
            return
        self.queue.complete(job.id, self.worker_id, result)

    def _needs_reverify(self, job: Job, result: dict[str, Any]) -> bool:
        if not result.get("success"):
            return False
        if job.purpose == "reverify":  # forced by the submitter
            return True
        if not job.settings.get("reverify", True):
            return False
        speedup = float(result.get("speedup") or 0.0)
        if needs_reverify(speedup, reverify=True,
                          above=float(job.settings.get("reverify_above", EvalConfig.reverify_above))):
            return True
        best = self._best_known(job)
        return best is not None and best >= 1.0 and speedup > 2 * best

    def _best_known(self, job: Job) -> float | None:
        """The best accepted speedup of another candidate of this task on this device type."""
        from sqlalchemy import func, select

        from kernelrl.store.models import CandidateRow, EvaluationRow

        with self.store.session() as s:
            return s.scalar(select(func.max(EvaluationRow.speedup)).join(CandidateRow)
                            .where(CandidateRow.task_id == job.task_id, CandidateRow.id != job.candidate_id,
                                   EvaluationRow.device_type == self.device_type, EvaluationRow.correct,
                                   EvaluationRow.executable, EvaluationRow.purpose != "reverify"))

    def _sources(self, job: Job) -> tuple[str, str]:
        """(task source, candidate source) in one query."""
        from kernelrl.store.models import CandidateRow, TaskRow

        from sqlalchemy import select

        with self.store.session() as s:
            return s.execute(select(TaskRow.source, CandidateRow.source).join(CandidateRow.task)
                             .where(CandidateRow.id == job.candidate_id)).one()

    def _evaluate(self, job: Job) -> dict[str, Any]:
        task_source, cand_source = self._sources(job)
        cfg = config_from_settings(job.settings, self.device)
        if job.parent_id is not None:  # a re-measurement is about the timing: correctness was checked already
            cfg = dataclasses.replace(cfg, correctness_trials=min(cfg.correctness_trials, REVERIFY_TRIALS))
        # The eager estimate (eager.py) is for reports and people, not the policy: a reward evaluation or a
        # re-measurement skips its ~0.5-1 s (evaluations per GPU-hour are a target of their own).
        eager = job.purpose != "reward" and job.parent_id is None
        if self.sandbox == "docker":
            from kernelrl.evaluation.docker_sandbox import run_in_container

            d = run_in_container(self.image, self.gpu_uuid, task_source, cand_source, dataclasses.asdict(cfg),
                                 labels={"kernelrl.worker": self.worker_id}, eager_estimate=eager)
        else:
            from kernelrl.evaluation.api import evaluate

            # (test fakes, --evaluate-fn, take the three positional arguments only)
            kw = {"eager_estimate": eager} if self.evaluate_fn is evaluate else {}
            res = self.evaluate_fn(task_source, cand_source, cfg, **kw)
            d = res.to_dict() if hasattr(res, "to_dict") else dict(res)
        d.update(worker=self.worker_id, worker_device=self.device, gpu_uuid=self.gpu_uuid, job_id=job.id)
        return d

    # -- compile-ahead --------------------------------------------------------------------------------------
    def _compile_ahead(self, current: Job) -> None:
        if self._pool is None:
            return
        try:
            nxt = self.queue.peek(self.device_kind, device_type=self.device_type, identities=(self.identity,), n=2,
                                  skip={current.id})
        except Exception as e:  # never let an optimisation fail a job
            log.warning("worker %s: peek failed: %s", self.worker_id, e)
            return
        self._prebuilt.add(current.candidate_id)
        for j in nxt:
            if j.candidate_id in self._prebuilt:
                continue
            self._prebuilt.add(j.candidate_id)
            self._pool.submit(self._prebuild, j)

    def _prebuild(self, job: Job) -> None:
        t0 = time.monotonic()
        entry: dict[str, Any] = {"job_id": job.id, "candidate_id": job.candidate_id}
        try:
            _, source = self._sources(job)
            if not any(m in source for m in BUILD_MARKERS):
                entry.update(how="skipped (nothing to build)", ok=True)
                return
            cfg = config_from_settings(job.settings, self.device)
            entry.update(how="sandboxed import", **precompile(source, cfg, self.device))
        except Exception as e:
            entry.update(ok=False, error=f"{type(e).__name__}: {e}"[:500])
        finally:
            entry["seconds"] = round(time.monotonic() - t0, 3)
            self.precompile_log.append(entry)








def kill_children() -> None:
    """Kill every descendant of this process (sandbox workers of an abandoned evaluation): a worker process
    that exits must not leave candidates running on its GPU. Only for a process that is only a worker."""
    import psutil

    for p in psutil.Process().children(recursive=True):
        try:
            p.kill()
        except psutil.Error:
            pass
