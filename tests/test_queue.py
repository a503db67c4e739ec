"""The job queue's semantics on the real Postgres and on SQLite (the ``store`` fixture runs both): exclusive
claims under concurrency, leases, write-once results, re-verification parents, exclusions, device matching."""

from __future__ import annotations

import threading
import time

from sqlalchemy import func, select

from kernelrl.store import Store
from kernelrl.store.models import EvalJobRow, EvaluationRow
from kernelrl.store.queue import JobQueue
from tests.test_store import make_task

RES = {"executable": True, "correct": True, "success": True, "speedup": 2.0, "flags": [], "timing": {},
       "evaluator_version": "v", "device_type": "cpu"}


def submit_jobs(store: Store, n: int, **kw) -> list[int]:
    q = JobQueue(store)
    tid = store.upsert_task(make_task())
    return [q.submit(tid, store.add_candidate(tid, f"class ModelNew: pass  # {i}", origin_stage="seed"),
                     {"device": "cpu", "i": i}, **kw) for i in range(n)]


def n_evaluations(store: Store) -> int:
    with store.session() as s:
        return s.scalar(select(func.count()).select_from(EvaluationRow))


def test_concurrent_claims_are_exclusive(store):
    ids = submit_jobs(store, 60)
    got: dict[str, list[int]] = {}

    def claimer(name):
        q = JobQueue(Store(store.url))
        mine = got.setdefault(name, [])
        while (j := q.claim(name, "cpu", 30)) is not None:
            mine.append(j.id)
            assert q.complete(j.id, name, RES) is not None
        q.store.engine.dispose()

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    claimed = [j for v in got.values() for j in v]
    assert sorted(claimed) == sorted(ids)  # every job exactly once
    assert n_evaluations(store) == 60


def test_complete_is_written_once(store):
    q = JobQueue(store)
    submit_jobs(store, 1)
    j = q.claim("w1")
    e1 = q.complete(j.id, "w1", RES)
    assert e1 is not None
    assert q.complete(j.id, "w1", RES) == e1  # idempotent: same id, nothing written
    assert q.complete(j.id, "intruder", RES) == e1  # a done job is never rewritten
    assert q.claim("w2") is None
    assert n_evaluations(store) == 1
    assert q.status([j.id])[j.id].status == "done"


def test_lapsed_lease_is_requeued_and_the_old_holder_cannot_write(store):
    q = JobQueue(store)
    submit_jobs(store, 1)
    j = q.claim("slow", lease_s=0.05)
    time.sleep(0.2)
    q.requeue_expired()
    assert q.heartbeat(j.id, "slow", 30) is False  # once requeued the lease is gone
    j2 = q.claim("fast", lease_s=30)
    assert j2 is not None and j2.id == j.id and j2.attempts == 2
    assert q.complete(j.id, "slow", RES) is None  # the lapsed holder writes nothing
    assert q.fail(j.id, "slow", "late") is False
    assert q.complete(j.id, "fast", RES) is not None
    assert n_evaluations(store) == 1


def test_max_attempts_then_failed_with_reason(store):
    q = JobQueue(store, max_attempts=2)
    [jid] = submit_jobs(store, 1)
    for w in ("a", "b"):
        j = q.claim(w, lease_s=0.05)
        assert j is not None
        time.sleep(0.15)
        q.requeue_expired()
    st = q.status([jid])[jid]
    assert st.status == "failed" and "lease lapsed on 2 claims" in st.error
    assert q.claim("c") is None


def test_heartbeat_extends_and_release_gives_back(store):
    q = JobQueue(store)
    [jid] = submit_jobs(store, 1)
    j = q.claim("w", lease_s=0.3)
    for _ in range(4):
        time.sleep(0.15)
        assert q.heartbeat(j.id, "w", 0.3)
    q.requeue_expired()
    assert q.status([jid])[jid].status == "running"
    assert q.release(j.id, "w") and not q.release(j.id, "w")
    j2 = q.claim("other")
    assert j2.id == jid and j2.attempts == 1  # a release does not count as an attempt


def test_harness_failure_retried_then_failed(store):
    q = JobQueue(store, max_attempts=2)
    [jid] = submit_jobs(store, 1)
    assert q.fail(q.claim("w").id, "w", "reference worker died", retry=True)
    assert q.status([jid])[jid].status == "queued"
    assert q.fail(q.claim("w").id, "w", "reference worker died", retry=True)
    st = q.status([jid])[jid]
    assert st.status == "failed" and "reference worker died" in st.error


def test_priority_device_kind_and_type(store):
    q = JobQueue(store)
    low, high = submit_jobs(store, 2)
    with store.session() as s:
        s.get(EvalJobRow, high).priority = 5
    [gpu] = submit_jobs(store, 1, device_kind="cuda", device_type="NVIDIA H200")
    assert q.claim("c1", "cpu").id == high
    assert q.claim("c2", "cpu").id == low
    assert q.claim("c3", "cpu") is None  # a cuda job never lands on a CPU worker
    assert q.claim("g1", "cuda", device_type="NVIDIA H100") is None  # nor on another GPU type
    assert q.claim("g2", "cuda", device_type="NVIDIA H200").id == gpu


def test_exclusion_lapses(store):
    q = JobQueue(store)
    [jid] = submit_jobs(store, 1, exclude_worker="GPU-aaa", exclude_for_s=0.4)
    assert q.claim("w1", identities=("GPU-aaa",)) is None
    assert q.peek(identities=("GPU-aaa",)) == []
    assert [j.id for j in q.peek(identities=("GPU-bbb",))] == [jid]
    time.sleep(0.6)
    assert q.claim("w1", identities=("GPU-aaa",)).id == jid  # no one else took it: the excluded one may


def test_reverify_parent_closed_with_child(store):
    q = JobQueue(store)
    [jid] = submit_jobs(store, 1)
    j = q.claim("a")
    first = dict(RES, speedup=5.0)
    child = q.defer_for_reverify(j.id, "a", first, exclude="a", wait_s=60, device_type="cpu")
    assert q.status([jid])[jid].status == "verifying"
    assert q.pending_result(jid)["speedup"] == 5.0
    assert q.claim("a", identities=("a",)) is None  # excluded
    c = q.claim("b", device_type="cpu", identities=("b",))
    assert c.id == child and c.parent_id == jid and c.purpose == "reverify"
    decided = dict(first, speedup=4.9, timing={"reverify": {"agree": True}})
    eid = q.complete_reverify(c.id, "b", dict(RES, speedup=4.9), jid, decided)
    assert q.complete_reverify(c.id, "b", dict(RES, speedup=4.9), jid, decided) == eid
    st = q.status([jid, child])
    assert st[jid].status == "done" and st[child].status == "done"
    with store.session() as s:
        assert s.get(EvaluationRow, st[jid].evaluation_id).speedup == 4.9
        assert s.get(EvaluationRow, st[child].evaluation_id).purpose == "reverify"
    assert n_evaluations(store) == 2


def test_failed_reverify_closes_parent_unverified(store):
    q = JobQueue(store, max_attempts=1)
    [jid] = submit_jobs(store, 1)
    j = q.claim("a")
    child = q.defer_for_reverify(j.id, "a", dict(RES, speedup=9.0), exclude="a", wait_s=0, device_type=None)
    c = q.claim("b", lease_s=0.05)
    assert c.id == child
    time.sleep(0.15)
    q.requeue_expired()  # the re-verifier died: the child fails after max attempts...
    st = q.status([jid, child])
    assert st[child].status == "failed" and st[jid].status == "done"
    with store.session() as s:  # ...and the parent is closed unverified: flagged, scored 0
        ev = s.get(EvaluationRow, st[jid].evaluation_id)
        assert ev.speedup == 0.0 and "reverify-mismatch" in ev.flags and ev.result["success"] is False


def test_cancel_fails_only_queued_jobs(store):
    q = JobQueue(store)
    a, b = submit_jobs(store, 2)
    j = q.claim("w")
    assert q.cancel([a, b], "gave up") == 1
    st = q.status([a, b])
    assert st[j.id].status == "running" and st[b if j.id == a else a].status == "failed"
    assert "cancelled: gave up" in st[b if j.id == a else a].error
