"""The evaluation service: a queue in the exemplar store, drained by one worker per dedicated device.

Client side (training rewards, search, augmentation, bench):

    from kernelrl.evaluation.service import EvalRequest, EvalService
    with EvalService(store, eval_config, local_workers=1) as svc:      # 0: rely on `kernelrl worker` processes
        results = svc.evaluate_many([EvalRequest(task, source, origin_stage="crl", run_name="r1")], timeout_s=600)
    # or: ids = svc.submit_many(requests); ...; results = svc.wait(ids, timeout_s=600)

Each result is ``EvalResult.to_dict()`` plus ``candidate_id``, ``evaluation_id``, ``job_id``, ``cached``
(answered from the store) and ``evaluated_at`` (UTC, minutes: when the evaluation was made). A failed job (the
harness, not the candidate, failed every attempt) comes back as ``success=False`` with flag ``evaluation-failed``
and the reason in ``error``; nothing raises for a candidate.

- **Cache.** A source already evaluated under the same evaluator version and device type is answered from the
  store without re-timing: a job born ``done`` (worker ``cache``) that points at the existing evaluation.
  ``purpose='final'`` needs a final evaluation (more correctness trials, longer budget); re-verification
  measurements are never used as answers. A source already queued or running with the same settings is
  joined (same job id) rather than timed twice. ``use_cache="same-settings"`` answers only from an evaluation
  of the same purpose stored under identical settings (what a re-run of a killed final scoring may reuse).
- **Local workers.** With ``local_workers > 0`` the service runs that many worker threads (the same loop as
  ``kernelrl worker``, ``kernelrl.evaluation.jobworker.Worker``) on its device, so the embedded default needs
  no separate process; each evaluation still runs in its own sandboxed subprocesses. One worker per device
  is the honest setting for timing; more only on CPU with cores to spare. Their re-verifications happen at
  once in fresh processes (``reverify_wait_s=0``) unless told to wait for another worker of the device type.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy import select

from kernelrl.config.stages import EvalConfig
from kernelrl.store.db import Store, settings_hash
from kernelrl.store.models import CandidateRow, EvaluationRow
from kernelrl.store.queue import JobQueue, JobStatus
from kernelrl.tasks.loader import Task

@dataclass
class EvalRequest:
    task: Task
    source: str
    candidate_id: int | None = None  # known already (else the candidate is added, idempotently on source hash)
    # reward (training), final (the paper's trials and budget), reverify (always re-measured elsewhere), or any
    # other label the caller wants stored with the evaluation
    purpose: str = "reward"
    priority: int = 0  # higher first
    origin_stage: str = "eval"
    origin_model: str | None = None
    run_name: str | None = None
    prompt: str | None = None
    analysis: str | None = None
    design: str | None = None


def resolve_device(device: str) -> str:
    if device in ("auto", "cuda"):
        import torch

        if device == "auto" and not torch.cuda.is_available():
            return "cpu"
        return "cuda:0"
    return device


class EvalService:
    def __init__(self, store: Store, eval_config: EvalConfig | None = None, local_workers: int = 1,
                 device: str | None = None, *, use_cache: bool | str = True, evaluate_fn: Callable | None = None,
                 evaluator_version: str | None = None, device_type: str | None = None, lease_s: float = 30.0,
                 reverify_wait_s: float = 0.0, poll_s: float = 0.1):
        """``device``: where jobs run (default: the config's; 'auto' picks cuda:0 when there is a GPU).
        ``device_type``: the GPU name results are cached under when the workers' GPU is not visible here.
        ``evaluate_fn``/``evaluator_version``: for tests (a fake evaluator and the version it reports)."""
        self.store = store
        self.cfg = eval_config or EvalConfig()
        self.device = resolve_device(device or self.cfg.device)
        self.device_kind = "cuda" if self.device.startswith("cuda") else "cpu"
        if device_type is None:
            try:
                from kernelrl.config.devices import device_name

                device_type = device_name(self.device)
            except Exception:  # workers on other hosts: no cache lookups without a known device type
                device_type = None
        self.device_type = device_type
        if evaluator_version is None:
            from kernelrl.evaluation import EVALUATOR_VERSION

            evaluator_version = EVALUATOR_VERSION
        self.evaluator_version = evaluator_version
        self.queue = JobQueue(store, lease_s=lease_s)
        self.use_cache = use_cache
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.workers = []
        self._task_ids: dict[str, int] = {}
        if local_workers > 0:
            from kernelrl.evaluation.jobworker import Worker, load_evaluate_fn

            fn = evaluate_fn or load_evaluate_fn()
            for i in range(local_workers):
                w = Worker(store, device=self.device, worker_id=f"local-{i}-{id(self):x}:{self.device}",
                           lease_s=lease_s, evaluate_fn=fn, stop_event=self._stop, idle_sleep_s=0.05,
                           grace_s=self.cfg.max_wall_s, reverify_wait_s=reverify_wait_s,
                           device_type=self.device_type or None)
                t = threading.Thread(target=w.run, name=f"kernelrl-eval-worker-{i}", daemon=True)
                t.start()
                self.workers.append(w)
                self._threads.append(t)

    # -- submit -----------------------------------------------------------------------------------------------
    def settings_dict(self, purpose: str) -> dict[str, Any]:
        d = dataclasses.asdict(self.cfg)
        d["device"] = self.device  # final evaluations come from services built with the final protocol's cfg
        return d

    def _cached(self, candidate_id: int, purpose: str, settings: dict[str, Any]) -> int | None:
        if not self.use_cache or self.device_type is None or purpose == "reverify":
            return None
        with self.store.session() as s:
            q = select(EvaluationRow.id).where(EvaluationRow.candidate_id == candidate_id,
                                               EvaluationRow.evaluator_version == self.evaluator_version,
                                               EvaluationRow.device_type == self.device_type,
                                               EvaluationRow.purpose != "reverify")
            if purpose == "final":
                q = q.where(EvaluationRow.purpose == "final")
            if self.use_cache == "same-settings":  # the very protocol asked for: a resumed stage's own results
                q = q.where(EvaluationRow.purpose == purpose, EvaluationRow.settings_hash == settings_hash(settings))
            return s.scalar(q.order_by(EvaluationRow.id.desc()).limit(1))

    def submit_many(self, requests: list[EvalRequest]) -> list[int]:
        """Queue the requests (or answer them from the store); one job id per request, in order."""
        job_ids = []
        for r in requests:
            task_id = self._task_ids.get(r.task.key)
            if task_id is None:
                task_id = self._task_ids[r.task.key] = self.store.upsert_task(r.task)
            cid = r.candidate_id or self.store.add_candidate(
                task_id, r.source, origin_stage=r.origin_stage, origin_model=r.origin_model, run_name=r.run_name,
                prompt=r.prompt, analysis=r.analysis, design=r.design)
            settings = self.settings_dict(r.purpose)
            # In flight first, then the store: a job that finishes between the two checks is still found.
            jid = self.queue.find_inflight(cid, settings, r.purpose) if r.purpose != "reverify" else None
            if jid is None:
                eid = self._cached(cid, r.purpose, settings)
                if eid is not None:
                    jid = self.queue.submit_cached(task_id, cid, eid, purpose=r.purpose, settings=settings,
                                                   device_kind=self.device_kind)
            if jid is None:
                jid = self.queue.submit(task_id, cid, settings, purpose=r.purpose, priority=r.priority,
                                        device_kind=self.device_kind, device_type=self.device_type)
            job_ids.append(jid)
        return job_ids

    # -- wait -------------------------------------------------------------------------------------------------
    def wait(self, job_ids: list[int], timeout_s: float | None = None) -> list[dict[str, Any]]:
        """Block until every job is done or failed; results in the order of ``job_ids``. TimeoutError (naming
        the pending ids) after ``timeout_s``; the jobs stay queued and a later wait can collect them."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pending = set(job_ids)
        statuses: dict[int, JobStatus] = {}
        while pending:
            st = self.queue.status(list(pending))
            missing = pending - set(st)
            if missing:
                raise KeyError(f"no such evaluation jobs: {sorted(missing)[:20]}")
            statuses.update(st)
            pending = {j for j in pending if not st[j].finished}
            if not pending:
                break
            if deadline is not None and time.monotonic() > deadline:
                ids = sorted(pending)
                raise TimeoutError(f"{len(ids)} evaluation job(s) still pending after {timeout_s}s: "
                                   f"{ids[:50]}{' ...' if len(ids) > 50 else ''}")
            if self._threads and not any(t.is_alive() for t in self._threads) and not self._stop.is_set():
                raise RuntimeError("every local evaluation worker thread has died; see the log")
            self.queue.requeue_expired(throttle=True)  # jobs of dead workers come back even while all idle
            time.sleep(self.poll_s)
        return self._results(job_ids, statuses)

    def _results(self, job_ids: list[int], statuses: dict[int, JobStatus]) -> list[dict[str, Any]]:
        eids = {st.evaluation_id for st in statuses.values() if st.evaluation_id is not None}
        with self.store.session() as s:
            rows = {r.id: r for r in s.scalars(select(EvaluationRow).where(EvaluationRow.id.in_(eids)))} if eids else {}
        out = []
        for j in job_ids:
            st = statuses[j]
            ev = rows.get(st.evaluation_id) if st.evaluation_id is not None else None
            if st.status == "failed" or ev is None:
                out.append({"executable": False, "correct": False, "success": False, "speedup": 0.0,
                            "flags": ["evaluation-failed"], "error": st.error or "evaluation job failed",
                            "timing": {}, "job_id": j, "candidate_id": st.candidate_id, "evaluation_id": None,
                            "cached": False})
                continue
            d = dict(ev.result or {})
            d.update(candidate_id=ev.candidate_id, evaluation_id=ev.id, job_id=j, cached=st.worker == "cache",
                     evaluated_at=ev.created_at.strftime("%Y-%m-%d %H:%M") if ev.created_at else None)
            out.append(d)
        return out

    def evaluate_many(self, requests: list[EvalRequest], timeout_s: float | None = None) -> list[dict[str, Any]]:
        return self.wait(self.submit_many(requests), timeout_s)

    def source_of(self, candidate_id: int) -> str:
        with self.store.session() as s:
            return s.get(CandidateRow, candidate_id).source

    # -- shutdown ---------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the local workers: a running evaluation is finished (within max_wall_s) or released."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self.cfg.max_wall_s + 30)
        self._threads = []

    def __enter__(self) -> EvalService:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
