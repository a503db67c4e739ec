"""Run-scoped candidates and exemplar pools on SQLite and the real Postgres (issue 31): the candidate_runs link
table and its migration (backfilled from candidates and attempts), a kernel that several runs produce counting
for each, and pools narrowed to one run and one device type."""

from __future__ import annotations

import random

from sqlalchemy import select

from kernelrl.store import Store
from kernelrl.store.models import CandidateRunRow
from kernelrl.store.sampling import BucketSampler, load_pool, sample_exemplars
from tests.test_store import make_task

OK = {"executable": True, "correct": True, "flags": [], "evaluator_version": "t"}


def _ok(store, cid, speedup, device_type="cpu"):
    return store.add_evaluation(cid, dict(OK, speedup=speedup, device_type=device_type))


def test_a_kernel_produced_by_two_runs_counts_for_each(store):
    tid = store.upsert_task(make_task())
    a = store.add_candidate(tid, "class ModelNew: pass\n", origin_stage="augment", run_name="smoke")
    b = store.add_candidate(tid, "class ModelNew: pass\n", origin_stage="augment", run_name="try1")
    c = store.add_candidate(tid, "class ModelNew: pass\n", origin_stage="crl", run_name="try1")
    store.add_candidate(tid, "class ModelNew: pass\n", origin_stage="crl", run_name="try1")  # idempotent link
    assert a == b == c
    assert store.run_candidate_ids("smoke") == {a} and store.run_candidate_ids("try1") == {a}
    assert store.run_candidate_ids("try1", ["crl"]) == {a} and store.run_candidate_ids("smoke", ["crl"]) == set()
    with store.session() as s:
        links = sorted((r.run_name, r.stage) for r in s.scalars(select(CandidateRunRow)).all())
    assert links == [("smoke", "augment"), ("try1", "augment"), ("try1", "crl")]
    _ok(store, a, 1.5)
    for run in ("smoke", "try1"):
        pool, _ = load_pool(store, tid, run_name=run)
        assert [e.candidate_id for e in pool] == [a]


def test_pool_is_the_runs_own_and_one_device_types(store):
    tid = store.upsert_task(make_task())
    mine = store.add_candidate(tid, "mine", origin_stage="crl", run_name="r1")
    other = store.add_candidate(tid, "other", origin_stage="crl", run_name="r2")
    gpu = store.add_candidate(tid, "gpu only", origin_stage="crl", run_name="r1")
    teacher = store.add_candidate(tid, "teacher", origin_stage="augment", run_name="r1")
    _ok(store, mine, 1.2)
    _ok(store, other, 50.0)
    _ok(store, gpu, 7.0, device_type="NVIDIA H100 80GB HBM3")
    _ok(store, teacher, 2.0)
    ids = lambda pool: sorted(e.candidate_id for e in pool[0])  # noqa: E731
    assert ids(load_pool(store, tid)) == sorted([mine, other, gpu, teacher])  # pool: store, any device
    assert ids(load_pool(store, tid, run_name="r1", device_type="cpu")) == sorted([mine, teacher])
    assert ids(load_pool(store, tid, run_name="r1", device_kind="cuda")) == [gpu]
    assert ids(load_pool(store, tid, run_name="r1", device_type="NVIDIA H100 80GB HBM3")) == [gpu]
    assert ids(load_pool(store, tid, run_name="r1", device_kind="cpu", stages=["crl"])) == [mine]
    # the latest evaluation *on that device type* decides: a later GPU failure does not hide the CPU success
    store.add_evaluation(mine, dict(OK, speedup=0.0, correct=False, device_type="NVIDIA H100 80GB HBM3"))
    assert ids(load_pool(store, tid, run_name="r1", device_type="cpu")) == sorted([mine, teacher])
    ex, snap = sample_exemplars(store, tid, BucketSampler(n=4), random.Random(0), run_name="r2", device_type="cpu")
    assert [e.candidate_id for e in ex] == [other] and snap > 0


def test_migration_backfills_links_from_candidates_and_attempts(store_url):
    """Upgrade a store at revision 0002 that has data: every candidate's first run and every run whose attempts
    produced it get a link, once; nothing else changes."""
    from sqlalchemy import text

    from kernelrl.store.models import CandidateRow

    from alembic import command

    s = Store(store_url)  # the fixture's store is at head: back to 0002, then data, then the upgrade
    with s.engine.begin() as conn:
        cfg = s.alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0002")
    assert "candidate_runs" not in s.table_names()
    tid = s.upsert_task(make_task())
    with s.session() as ses:
        ses.execute(text("INSERT INTO candidates (task_id, source, source_hash, origin_stage, run_name, meta, "
                         "created_at) VALUES (:t, 'k', 'h1', 'augment', 'smoke', '{}', CURRENT_TIMESTAMP), "
                         "(:t, 'j', 'h2', 'seed', NULL, '{}', CURRENT_TIMESTAMP)"), {"t": tid})
        k, j = ses.scalars(select(CandidateRow.id).order_by(CandidateRow.id)).all()
    with s.session() as ses:  # the 0002 code wrote attempts without links
        for i, (run, stage, cid) in enumerate([("try1", "augment", k), ("try1", "augment", k), ("try1", "crl", k),
                                               ("smoke", "augment", k), ("x", "crl", None), (None, "eval", j)]):
            ses.execute(text("INSERT INTO attempts (task_id, candidate_id, run_name, stage, exemplar_ids, dedup_key, "
                             "created_at) VALUES (:t, :c, :r, :s, '[]', :d, CURRENT_TIMESTAMP)"),
                        {"t": tid, "c": cid, "r": run, "s": stage, "d": f"a{i}"})
    s.upgrade()
    with s.session() as ses:
        links = sorted((r.candidate_id, r.run_name, r.stage) for r in ses.scalars(select(CandidateRunRow)).all())
    assert links == [(k, "smoke", "augment"), (k, "try1", "augment"), (k, "try1", "crl")]
    assert s.stats()["candidates"] == 2 and s.run_candidate_ids("try1") == {k}
    s.engine.dispose()


def test_a_run_reports_the_kernels_it_produced_even_when_another_run_produced_them_first(store):
    """The issue's `try1` after `smoke`: its correct candidates were first produced by `smoke`; its bench still
    counts them (and the teachers' row and the policies' row stay apart by stage)."""
    from kernelrl.reports.sources import best_from_store

    task = make_task()
    tid = store.upsert_task(task)
    teacher = store.add_candidate(tid, "teacher kernel", origin_stage="augment", run_name="smoke")
    store.add_candidate(tid, "teacher kernel", origin_stage="augment", run_name="try1")
    sample = store.add_candidate(tid, "policy kernel", origin_stage="crl", run_name="smoke")
    store.add_attempt(tid, stage="crl", run_name="try1", candidate_id=sample, response="r", dedup_key="t1")
    _ok(store, teacher, 2.0)
    _ok(store, sample, 1.5)
    for run in ("smoke", "try1"):
        assert [c["candidate_id"] for c in best_from_store(store, [task.key], run=run)[task.key]] == [teacher]
        assert [c["candidate_id"] for c in best_from_store(store, [task.key], run=run, stages=["crl"])[task.key]] \
            == [sample]
    assert best_from_store(store, [task.key], run="other") == {}
    # a stage over every run: the stage's links, and candidates first produced by it
    assert [c["candidate_id"] for c in best_from_store(store, [task.key], stages=["crl"])[task.key]] == [sample]
