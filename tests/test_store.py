"""Exemplar store on SQLite and the real Postgres: migrations, idempotent writes, stages, stats."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select

from kernelrl.store import Store
from kernelrl.store.models import CandidateRow, EvaluationRow
from kernelrl.tasks.loader import Task

REF = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x): return x\n" \
      "def get_inputs(): return [torch.randn(4)]\ndef get_init_inputs(): return []\n"


def make_task(i: int = 0) -> Task:
    return Task(key=f"test/L1/{i:02d}_T", name=f"{i:02d}_T", level=1, suite="test", source=REF)


def test_upgrade_creates_all_tables(store):
    names = set(store.table_names())
    assert {"tasks", "candidates", "attempts", "evaluations", "runs", "stages", "eval_jobs"} <= names
    from alembic.script import ScriptDirectory

    assert store.current_revision() == ScriptDirectory.from_config(store.alembic_config()).get_current_head()
    store.upgrade()  # idempotent


def test_candidate_is_idempotent_on_source_hash(store):
    tid = store.upsert_task(make_task())
    assert store.upsert_task(make_task()) == tid
    a = store.add_candidate(tid, "class ModelNew: pass\n", origin_stage="seed")
    b = store.add_candidate(tid, "class ModelNew: pass   \n\n", origin_stage="augment")  # same after normalising
    c = store.add_candidate(tid, "class ModelNew: x = 1\n", origin_stage="seed")
    assert a == b != c
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(CandidateRow)) == 2


def test_evaluations_and_scored_candidates(store):
    tid = store.upsert_task(make_task())
    good = store.add_candidate(tid, "good", origin_stage="seed")
    bad = store.add_candidate(tid, "bad", origin_stage="seed")
    res = {"executable": True, "correct": True, "speedup": 1.5, "flags": [], "error": None, "timing": {},
           "evaluator_version": "v1", "device_type": "cpu"}
    store.add_evaluation(good, res, {"budget_s": 1})
    store.add_evaluation(bad, dict(res, correct=False, speedup=0.0), {"budget_s": 1})
    pool = store.scored_candidates(tid)
    assert [p["candidate_id"] for p in pool] == [good] and pool[0]["speedup"] == 1.5
    assert len(store.scored_candidates(tid, successful_only=False)) == 2
    assert store.cached_evaluation(good, "v1", "cpu")["speedup"] == 1.5
    assert store.cached_evaluation(good, "v2", "cpu") is None


def test_attempts_dedup_and_unparsed_kept(store):
    tid = store.upsert_task(make_task())
    a = store.add_attempt(tid, stage="crl", response="garbage", parse_error="no code block", dedup_key="r1:crl:0")
    b = store.add_attempt(tid, stage="crl", response="garbage", parse_error="no code block", dedup_key="r1:crl:0")
    c = store.add_attempt(tid, stage="crl", response="other", parse_error="no code block")
    assert a == b != c
    assert store.stats()["attempts"] == 2


def test_stage_records(store):
    store.set_stage("run1", "sft", status="running", recipe="smoke", cache_key="abc")
    store.set_stage("run1", "sft", status="done", manifest={"metrics": {"loss": 1.0}}, checkpoint_uri="file:///x")
    rec = store.stage_record("run1", "sft")
    assert rec["status"] == "done" and rec["cache_key"] == "abc" and rec["attempts"] == 1
    assert rec["manifest"]["metrics"]["loss"] == 1.0
    assert store.stage_record("run1", "crl") is None


def test_concurrent_writers_same_candidate(store):
    """Eight threads insert the same 20 candidates: each lands once."""
    tid = store.upsert_task(make_task())
    errors = []

    def writer():
        try:
            for i in range(20):
                store.add_candidate(tid, f"src {i}", origin_stage="seed")
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(CandidateRow)) == 20


def test_migration_keeps_existing_data(store_url):
    s1 = Store(store_url)
    tid = s1.upsert_task(make_task())
    s1.add_candidate(tid, "keep me", origin_stage="seed")
    s1.engine.dispose()
    s2 = Store(store_url)
    s2.upgrade()
    assert s2.stats()["candidates"] == 1
    s2.engine.dispose()


def test_unreachable_store_is_a_clear_error():
    from kernelrl.errors import StoreError

    with pytest.raises(StoreError, match="cannot connect"):
        Store("postgresql+psycopg2://nobody:secret@127.0.0.1:1/none").upgrade()


def test_nul_characters_are_stored_on_postgres_too(store):
    """PostgreSQL text refuses NUL (SQLite keeps it): a completion or a hostile candidate's error message with one
    once killed a crl step on the H100. Every text column stores it as U+FFFD, through the ORM and the queue's
    Core statements alike; JSON keeps it escaped."""
    from kernelrl.store.queue import JobQueue

    from kernelrl.tasks import get_task

    tid = store.upsert_task(get_task("builtin/L1/02_Softmax"))
    cid = store.add_candidate(tid, "x = 1\n", origin_stage="crl", run_name="r\x00", analysis="a\x00b")
    aid = store.add_attempt(tid, stage="crl", run_name="r\x00", response="code\x00\x00end", parse_error="bad\x00",
                            dedup_key="k\x00")
    q = JobQueue(store)
    jid = q.submit(tid, cid, {"device": "cpu"}, purpose="reward", device_kind="cpu")
    job = q.claim("w\x00", device_kind="cpu")
    assert job is not None and job.id == jid
    q.fail(jid, "w\x00", "candidate raised ValueError('\x00')")
    eid = store.add_evaluation(cid, {"executable": False, "correct": False, "speedup": 0.0,
                                     "error": "boom\x00", "flags": ["runtime-error"]})
    from sqlalchemy import text

    with store.engine.connect() as c:
        assert c.execute(text(f"select response from attempts where id = {aid}")).scalar() == "code\ufffd\ufffdend"
        assert c.execute(text(f"select analysis from candidates where id = {cid}")).scalar() == "a\ufffdb"
        assert "\ufffd" in c.execute(text(f"select error from eval_jobs where id = {jid}")).scalar()
        assert c.execute(text(f"select error from evaluations where id = {eid}")).scalar() == "boom\ufffd"
