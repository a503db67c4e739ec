"""Store under faults: a connection killed mid-transaction, many concurrent writers, migrations over data."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select, text

from kernelrl.store import Store
from kernelrl.store.models import AttemptRow, CandidateRow
from tests.test_store import make_task


@pytest.mark.postgres
def test_connection_terminated_mid_transaction_is_retried(pg_url, pg_server):
    """The backend is killed between the INSERT and the COMMIT: the write is retried once, not lost or doubled."""
    store = Store(pg_url)
    store.upgrade()
    tid = store.upsert_task(make_task())
    calls = {"n": 0}

    def work(s):
        calls["n"] += 1
        s.add(CandidateRow(task_id=tid, source="x", source_hash="h" * 64, origin_stage="seed", meta={}))
        s.flush()
        if calls["n"] == 1:
            pid = s.execute(text("select pg_backend_pid()")).scalar()
            admin = Store(pg_server).engine
            with admin.connect() as c:
                c.execute(text("select pg_terminate_backend(:p)"), {"p": pid})
                c.commit()
            admin.dispose()
        return True

    assert store.retrying(work, delay_s=0.05) is True
    assert calls["n"] == 2
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(CandidateRow)) == 1
    store.engine.dispose()


@pytest.mark.postgres
def test_all_connections_dropped_between_writes(pg_url, pg_server):
    """A server-side disconnect of every session (a failover, say) costs no write: the pool re-connects."""
    store = Store(pg_url)
    store.upgrade()
    tid = store.upsert_task(make_task())
    for i in range(5):
        store.add_candidate(tid, f"before {i}", origin_stage="seed")
    admin = Store(pg_server).engine
    dbname = pg_url.rsplit("/", 1)[1]
    with admin.connect() as c:
        c.execute(text("select pg_terminate_backend(pid) from pg_stat_activity where datname = :d"), {"d": dbname})
        c.commit()
    admin.dispose()
    for i in range(5):
        store.add_candidate(tid, f"after {i}", origin_stage="seed")
    assert store.stats()["candidates"] == 10
    store.engine.dispose()


def _writers(store: Store, tid: int, n_writers: int, per_writer: int) -> list[Exception]:
    errors: list[Exception] = []

    def writer(w: int) -> None:
        try:
            for i in range(per_writer):
                cid = store.add_candidate(tid, f"w{w} i{i}", origin_stage="crl")
                store.add_attempt(tid, stage="crl", candidate_id=cid, response="r", dedup_key=f"w{w}:{i}")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(n_writers)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    return errors


@pytest.mark.postgres
def test_eight_concurrent_writers_postgres(pg_url):
    store = Store(pg_url)
    store.upgrade()
    tid = store.upsert_task(make_task())
    assert _writers(store, tid, 8, 500) == []
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(CandidateRow)) == 4000
        assert s.scalar(select(func.count()).select_from(AttemptRow)) == 4000
    store.engine.dispose()


def test_concurrent_writers_sqlite(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    store.upgrade()
    tid = store.upsert_task(make_task())
    assert _writers(store, tid, 4, 100) == []
    assert store.stats()["candidates"] == 400 and store.stats()["attempts"] == 400
    store.engine.dispose()


def test_upgrade_from_base_keeps_data(store_url):
    """Downgrade to the first revision and upgrade again: rows of the base tables survive every migration."""
    from alembic import command

    store = Store(store_url)
    tid = store.upsert_task(make_task())
    store.add_candidate(tid, "precious", origin_stage="seed")
    with store.engine.begin() as conn:
        cfg = store.alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0001")
    store.upgrade()
    assert store.stats()["candidates"] == 1
    store.engine.dispose()
