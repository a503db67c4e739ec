"""The evaluation job queue: a table (``eval_jobs``) in the exemplar store, drained by evaluation workers.

    q = JobQueue(store)
    jid = q.submit(task_id, candidate_id, settings, purpose="reward", priority=0, device_kind="cuda")
    job = q.claim("host:123:cuda:0", device_kind="cuda", lease_s=30)   # None when nothing is claimable
    q.heartbeat(job.id, "host:123:cuda:0", lease_s=30)                 # False: the lease was lost
    eid = q.complete(job.id, "host:123:cuda:0", result_dict)           # written once; a repeat returns eid
    q.status([jid])                                                    # {jid: JobStatus(...)}

Life of a job: ``queued -> running -> done | failed``; a speedup that needs re-verification goes
``running -> verifying`` while a child job (``parent_id``) re-measures it on another worker, and the child's
completion closes the parent in the same transaction (``complete_reverify``).

Guarantees (tested on Postgres and SQLite, tests/test_queue*.py):
- *Exclusive claim.* Postgres: ``UPDATE ... WHERE id = (SELECT id ... FOR UPDATE SKIP LOCKED LIMIT 1)``, so
  concurrent workers never wait on each other's rows. SQLite (one writer at a time): the same single UPDATE
  statement, which takes the write lock before it reads (busy_timeout queues the writers), guarded by
  ``status='queued'``; RETURNING tells the claimer which row it got.
- *Leases.* A claim sets ``lease_expires_at``; the worker heart-beats to extend it. ``requeue_expired`` (run by
  claims, at most once a second per queue object) puts lapsed jobs back, counting attempts; after
  ``max_attempts`` claims the job fails with the reason. On Postgres lease times come from the server's
  clock, so workers on hosts with skewed clocks agree.
- *Written once.* ``complete`` first flips the job ``running -> done`` with a guard on (worker, status); only
  the lease holder can do it, in the same transaction that stores the evaluation. A second ``complete`` of a
  done job returns the same evaluation id and writes nothing; a worker whose lease lapsed (and whose job was
  claimed again) gets None and writes nothing.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, insert, or_, select, update

from kernelrl.store.db import Store, settings_hash
from kernelrl.store.models import EvalJobRow, EvaluationRow, utcnow

MAX_ATTEMPTS = 3  # claims per job before it is failed: a candidate that kills its worker twice is not retried
REQUEUE_EVERY_S = 1.0  # how often one queue object scans for lapsed leases (a cheap indexed UPDATE)
PENDING = ("queued", "running", "verifying")
T = EvalJobRow.__table__
C = T.c


@dataclass
class Job:
    id: int
    task_id: int
    candidate_id: int
    settings: dict[str, Any]
    purpose: str
    priority: int
    device_kind: str
    device_type: str | None
    attempts: int
    exclude_worker: str | None
    parent_id: int | None
    worker: str | None = None


@dataclass
class JobStatus:
    status: str
    evaluation_id: int | None
    error: str | None
    worker: str | None
    candidate_id: int
    purpose: str

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed")


def _job(r) -> Job:
    return Job(r.id, r.task_id, r.candidate_id, dict(r.settings or {}), r.purpose, r.priority, r.device_kind,
               r.device_type, r.attempts, r.exclude_worker, r.parent_id, r.worker)


def _evaluation_values(candidate_id: int, result: dict[str, Any], settings: dict[str, Any], shash: str,
                       purpose: str) -> dict[str, Any]:
    return dict(candidate_id=candidate_id, device_type=str(result.get("device_type") or "unknown"),
                evaluator_version=str(result.get("evaluator_version") or "unknown"), settings_hash=shash,
                executable=bool(result.get("executable")), correct=bool(result.get("correct")),
                speedup=float(result.get("speedup") or 0.0), flags=list(result.get("flags") or []),
                error=result.get("error"), timing=dict(result.get("timing") or {}), result=result,
                settings=settings or {}, purpose=purpose, created_at=utcnow())


class JobQueue:
    def __init__(self, store: Store, lease_s: float = 60.0, max_attempts: int = MAX_ATTEMPTS):
        self.store = store
        self.lease_s = lease_s
        self.max_attempts = max_attempts
        self._last_requeue = 0.0

    # -- clocks -----------------------------------------------------------------------------------------------
    def _now(self):
        """Now, as a SQL expression: the server's clock on Postgres, this host's on SQLite (one host anyway)."""
        return func.now() if self.store.is_postgres else utcnow()

    def _later(self, seconds: float):
        delta = dt.timedelta(seconds=seconds)
        return func.now() + delta if self.store.is_postgres else utcnow() + delta

    # -- submit -----------------------------------------------------------------------------------------------
    def submit(self, task_id: int, candidate_id: int, settings: dict[str, Any], *, purpose: str = "reward",
               priority: int = 0, device_kind: str = "any", device_type: str | None = None,
               exclude_worker: str | None = None, exclude_for_s: float | None = None,
               parent_id: int | None = None) -> int:
        """Queue one evaluation; returns the job id. ``exclude_worker``: not on this worker/GPU (for
        ``exclude_for_s`` seconds when given, else for ever)."""
        def work(s):
            return s.execute(insert(T).values(
                task_id=task_id, candidate_id=candidate_id, settings=settings, settings_hash=settings_hash(settings),
                purpose=purpose, priority=priority, device_kind=device_kind, device_type=device_type,
                exclude_worker=exclude_worker, parent_id=parent_id, status="queued", attempts=0,
                exclude_until=None if exclude_for_s is None else self._later(exclude_for_s),
                created_at=utcnow()).returning(C.id)).scalar_one()

        return self.store.retrying(work)

    def submit_cached(self, task_id: int, candidate_id: int, evaluation_id: int, *, purpose: str = "reward",
                      settings: dict[str, Any] | None = None, device_kind: str = "any") -> int:
        """A job answered from the store: born done (worker 'cache'), pointing at the existing evaluation."""
        def work(s):
            now = utcnow()
            return s.execute(insert(T).values(
                task_id=task_id, candidate_id=candidate_id, settings=settings or {},
                settings_hash=settings_hash(settings), purpose=purpose, priority=0, device_kind=device_kind,
                status="done", worker="cache", evaluation_id=evaluation_id, attempts=0, created_at=now,
                claimed_at=now, finished_at=now).returning(C.id)).scalar_one()

        return self.store.retrying(work)

    def find_inflight(self, candidate_id: int, settings: dict[str, Any], purpose: str) -> int | None:
        """A queued/running/verifying job for the same candidate, settings and purpose (a duplicate submission
        joins it instead of timing the same source twice)."""
        with self.store.session() as s:
            return s.scalar(select(C.id).where(C.candidate_id == candidate_id,
                                               C.settings_hash == settings_hash(settings), C.purpose == purpose,
                                               C.status.in_(PENDING), C.parent_id.is_(None))
                            .order_by(C.id).limit(1))

    # -- claim ------------------------------------------------------------------------------------------------
    def _claimable(self, device_kind: str, device_type: str | None, identities: tuple[str, ...]):
        kinds = ["any", device_kind] if device_kind != "any" else ["any", "cpu", "cuda"]
        conds = [C.status == "queued", C.device_kind.in_(kinds)]
        conds.append(C.device_type.is_(None) if device_type is None
                     else or_(C.device_type.is_(None), C.device_type == device_type))
        if identities:
            conds.append(or_(C.exclude_worker.is_(None), C.exclude_worker.not_in(identities),
                             and_(C.exclude_until.is_not(None), C.exclude_until < self._now())))
        return conds

    def claim(self, worker: str, device_kind: str = "any", lease_s: float | None = None, *,
              device_type: str | None = None, identities: tuple[str, ...] | list[str] = ()) -> Job | None:
        """Take the next job (highest priority, then oldest) this worker may run, or None.

        ``identities``: what this worker is known as (its id, its GPU's UUID); a job excluding one of them is
        skipped until its exclusion lapses. ``device_type``: jobs pinned to another device type are skipped."""
        self.requeue_expired(throttle=True)
        ids = tuple(dict.fromkeys([worker, *identities]))
        lease = lease_s or self.lease_s
        sub = (select(C.id).where(*self._claimable(device_kind, device_type, ids))
               .order_by(C.priority.desc(), C.id).limit(1).with_for_update(skip_locked=True).scalar_subquery())

        def work(s):
            row = s.execute(update(T).where(C.id == sub, C.status == "queued")
                            .values(status="running", worker=worker, claimed_at=self._now(),
                                    heartbeat_at=self._now(), lease_expires_at=self._later(lease),
                                    attempts=C.attempts + 1)
                            .returning(*T.c)).first()
            return None if row is None else _job(row)

        return self.store.retrying(work)

    def peek(self, device_kind: str = "any", *, device_type: str | None = None, identities=(), n: int = 2,
             skip: set[int] | None = None) -> list[Job]:
        """The next ``n`` jobs this worker would claim, without claiming them (compile-ahead)."""
        q = (select(T).where(*self._claimable(device_kind, device_type, tuple(identities)))
             .order_by(C.priority.desc(), C.id).limit(n + len(skip or ())))
        with self.store.session() as s:
            rows = [_job(r) for r in s.execute(q).all()]
        return [j for j in rows if not skip or j.id not in skip][:n]

    # -- leases -----------------------------------------------------------------------------------------------
    def heartbeat(self, job_id: int, worker: str, lease_s: float | None = None) -> bool:
        """Extend the lease; False when this worker no longer holds the job (lapsed and re-claimed, or gone)."""
        def work(s):
            res = s.execute(update(T).where(C.id == job_id, C.worker == worker, C.status == "running")
                            .values(heartbeat_at=self._now(), lease_expires_at=self._later(lease_s or self.lease_s)))
            return res.rowcount == 1

        return self.store.retrying(work)

    def requeue_expired(self, throttle: bool = False) -> int:
        """Lapsed leases go back to the queue (attempts counted); after ``max_attempts`` claims, failed."""
        if throttle and time.monotonic() - self._last_requeue < REQUEUE_EVERY_S:
            return 0
        self._last_requeue = time.monotonic()

        def work(s):
            lapsed = and_(C.status == "running", C.lease_expires_at < self._now())
            failed = s.execute(update(T).where(lapsed, C.attempts >= self.max_attempts)
                               .values(status="failed", finished_at=self._now(),
                                       error=f"lease lapsed on {self.max_attempts} claims: the worker died or "
                                             f"hung each time (a candidate that kills or stalls its worker?)")
                               .returning(C.id, C.parent_id)).all()
            for r in failed:
                if r.parent_id is not None:
                    self._close_parent_unverified(s, r.parent_id, f"re-verification job {r.id} failed")
            back = s.execute(update(T).where(lapsed, C.attempts < self.max_attempts)
                             .values(status="queued", lease_expires_at=None, error="lease lapsed; re-queued")
                             .returning(C.id)).all()
            return len(failed) + len(back)

        return self.store.retrying(work)

    def release(self, job_id: int, worker: str) -> bool:
        """Give a claimed job back (graceful stop): it is queued again and this claim does not count."""
        def work(s):
            res = s.execute(update(T).where(C.id == job_id, C.worker == worker, C.status == "running")
                            .values(status="queued", worker=None, lease_expires_at=None,
                                    attempts=func.greatest(C.attempts - 1, 0) if self.store.is_postgres
                                    else func.max(C.attempts - 1, 0)))
            return res.rowcount == 1

        return self.store.retrying(work)

    # -- results ----------------------------------------------------------------------------------------------
    def _take(self, s, job_id: int, holder: str, status: str, **values) -> bool:
        """Guarded transition of a job this worker holds (running); the first write of the transaction, so on
        SQLite it takes the write lock before anything is read."""
        res = s.execute(update(T).where(C.id == job_id, C.worker == holder, C.status == "running")
                        .values(status=status, **values))
        return res.rowcount == 1

    def _existing(self, s, job_id: int) -> int | None:
        row = s.execute(select(C.status, C.evaluation_id).where(C.id == job_id)).first()
        return row.evaluation_id if row is not None and row.status == "done" else None

    def _store_evaluation(self, s, job_id: int, result: dict[str, Any], purpose: str | None = None,
                          row=None) -> int:
        if row is None:
            row = s.execute(select(C.candidate_id, C.settings, C.settings_hash, C.purpose)
                            .where(C.id == job_id)).one()
        eid = s.execute(insert(EvaluationRow.__table__).values(
            **_evaluation_values(row.candidate_id, result, row.settings, row.settings_hash, purpose or row.purpose))
            .returning(EvaluationRow.__table__.c.id)).scalar_one()
        s.execute(update(T).where(C.id == job_id).values(evaluation_id=eid))
        return eid

    def complete(self, job_id: int, worker: str, result: dict[str, Any]) -> int | None:
        """Store the evaluation and close the job in one transaction. Returns the evaluation id; the same id
        again for a job already done (nothing written); None if this worker does not hold the job."""
        def work(s):
            row = s.execute(update(T).where(C.id == job_id, C.worker == worker, C.status == "running")
                            .values(status="done", finished_at=self._now(), lease_expires_at=None)
                            .returning(C.candidate_id, C.settings, C.settings_hash, C.purpose)).first()
            if row is None:
                return self._existing(s, job_id)
            return self._store_evaluation(s, job_id, result, row=row)

        return self.store.retrying(work)

    def defer_for_reverify(self, job_id: int, worker: str, result: dict[str, Any], *, exclude: str,
                           wait_s: float, device_type: str | None, priority_boost: int = 1000) -> int | None:
        """Park a job whose speedup needs a second measurement: the job goes ``running -> verifying`` with its
        first measurement kept, and a ``reverify`` child job is queued that ``exclude`` (this worker's GPU or id)
        may take only after ``wait_s`` (the fresh-process fallback when no other worker of the device type takes
        it). Returns the child's id; None if this worker does not hold the job."""
        def work(s):
            if not self._take(s, job_id, worker, "verifying", pending_result=result, lease_expires_at=None):
                return None
            parent = s.execute(select(T).where(C.id == job_id)).one()
            return s.execute(insert(T).values(
                task_id=parent.task_id, candidate_id=parent.candidate_id, settings=parent.settings,
                settings_hash=parent.settings_hash, purpose="reverify", priority=parent.priority + priority_boost,
                device_kind=parent.device_kind, device_type=device_type, exclude_worker=exclude,
                exclude_until=self._later(wait_s), parent_id=job_id, status="queued", attempts=0,
                created_at=utcnow()).returning(C.id)).scalar_one()

        return self.store.retrying(work)

    def pending_result(self, job_id: int) -> dict[str, Any] | None:
        with self.store.session() as s:
            return s.scalar(select(C.pending_result).where(C.id == job_id))

    def complete_reverify(self, job_id: int, worker: str, result: dict[str, Any], parent_id: int,
                          parent_result: dict[str, Any]) -> int | None:
        """Close a re-verification job and its parent in one transaction: the child's own measurement is stored
        (purpose 'reverify'), the parent gets ``parent_result`` (the decided result). Idempotent like complete."""
        def work(s):
            if not self._take(s, job_id, worker, "done", finished_at=self._now(), lease_expires_at=None):
                return self._existing(s, job_id)
            eid = self._store_evaluation(s, job_id, result, purpose="reverify")
            res = s.execute(update(T).where(C.id == parent_id, C.status == "verifying")
                            .values(status="done", finished_at=self._now()))
            if res.rowcount == 1:
                self._store_evaluation(s, parent_id, parent_result)
            return eid

        return self.store.retrying(work)

    def _close_parent_unverified(self, s, parent_id: int, why: str) -> None:
        res = s.execute(update(T).where(C.id == parent_id, C.status == "verifying")
                        .values(status="done", finished_at=self._now()).returning(C.pending_result)).first()
        if res is None:
            return
        first = dict(res.pending_result or {})
        flags = list(first.get("flags") or [])
        if "reverify-mismatch" not in flags:
            flags.append("reverify-mismatch")
        timing = dict(first.get("timing") or {})
        timing["reverify"] = {"agree": False, "error": why, "first_speedup": first.get("speedup")}
        first.update(flags=flags, timing=timing, speedup=0.0, success=False,
                     error=(first.get("error") or f"speedup not confirmed: {why}"))
        self._store_evaluation(s, parent_id, first)

    def fail(self, job_id: int, worker: str, error: str, *, retry: bool = False) -> bool:
        """The harness (not the candidate) failed on this job. ``retry``: queue it again while attempts remain.
        A failed re-verification closes its parent unverified (scored 0, flagged)."""
        def work(s):
            row = s.execute(select(C.attempts, C.parent_id).where(C.id == job_id, C.worker == worker,
                                                                   C.status == "running")).first()
            if row is None:
                return False
            if retry and row.attempts < self.max_attempts:
                return self._take(s, job_id, worker, "queued", worker=None, lease_expires_at=None,
                                  error=error[:4000])
            if not self._take(s, job_id, worker, "failed", error=error[:4000], finished_at=self._now(),
                              lease_expires_at=None):
                return False
            if row.parent_id is not None:
                self._close_parent_unverified(s, row.parent_id, f"re-verification failed: {error[:300]}")
            return True

        return self.store.retrying(work)

    def cancel(self, job_ids: list[int], reason: str = "cancelled") -> int:
        """Fail the given jobs that are still queued (a client gave up on them); running ones finish."""
        def work(s):
            return s.execute(update(T).where(C.id.in_(job_ids), C.status == "queued")
                             .values(status="failed", error=f"cancelled: {reason}"[:4000],
                                     finished_at=self._now())).rowcount

        return self.store.retrying(work) if job_ids else 0

    # -- status -----------------------------------------------------------------------------------------------
    def status(self, job_ids: list[int]) -> dict[int, JobStatus]:
        out: dict[int, JobStatus] = {}
        ids = list(dict.fromkeys(job_ids))
        with self.store.session() as s:
            for i in range(0, len(ids), 500):
                for r in s.execute(select(C.id, C.status, C.evaluation_id, C.error, C.worker, C.candidate_id,
                                          C.purpose).where(C.id.in_(ids[i:i + 500]))):
                    out[r.id] = JobStatus(r.status, r.evaluation_id, r.error, r.worker, r.candidate_id, r.purpose)
        return out

    def counts(self) -> dict[str, int]:
        with self.store.session() as s:
            return {st: n for st, n in s.execute(select(C.status, func.count()).group_by(C.status))}
