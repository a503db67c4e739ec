"""Worker processes (``kernelrl worker``) on the real Postgres and on SQLite: many workers drain a queue with no job
lost or done twice, a SIGKILLed worker's job is finished by another, SIGTERM is graceful, `workers up` starts
and stops workers. The workers use a fast fake evaluator (tests/_fake_eval.py, passed with the hidden
--evaluate-fn option)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import func, select

from kernelrl.evaluation.jobworker import Worker
from kernelrl.store import Store
from kernelrl.store.models import EvalJobRow, EvaluationRow
from kernelrl.store.queue import JobQueue
from tests._fake_eval import fake_evaluate
from tests.test_queue import submit_jobs

FAKE = "tests._fake_eval:fake_evaluate"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path):
    if request.param == "sqlite":
        u = f"sqlite:///{tmp_path / 'q.db'}"
    else:
        u = request.getfixturevalue("pg_url")
    Store(u).upgrade()
    return u


def start_worker(url: str, *extra: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kernelrl.cli", "worker", "--device", "cpu", "--store", url,
                             "--evaluate-fn", FAKE, "--idle-sleep-s", "0.1", *extra], cwd=ROOT,
                            env=dict(os.environ, **(env or {})), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def wait_status(q: JobQueue, job: int, status: str, timeout: float = 30.0) -> None:
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if q.status([job])[job].status == status:
            return
        time.sleep(0.05)
    raise AssertionError(f"job {job} never reached {status}: {q.status([job])[job]}")


def finish(p: subprocess.Popen, timeout: float = 120) -> str:
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out
    return out


def check_drained(store: Store, ids: list[int], n_workers: int) -> None:
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(EvaluationRow)) == len(ids)  # none done twice
        rows = s.scalars(select(EvalJobRow).where(EvalJobRow.id.in_(ids))).all()
        assert len(rows) == len(ids) and all(j.status == "done" and j.evaluation_id for j in rows)  # none lost
        assert len({j.evaluation_id for j in rows}) == len(ids)
        assert len({j.worker for j in rows}) == n_workers  # every worker took part


@pytest.mark.postgres
def test_four_worker_processes_drain_200_jobs_postgres(pg_url):
    store = Store(pg_url)
    store.upgrade()
    ids = submit_jobs(store, 200)
    procs = [start_worker(pg_url, "--idle-exit-s", "2", env={"FAKE_EVAL_SLEEP": "0.02"}) for _ in range(4)]
    for p in procs:
        finish(p)
    check_drained(store, ids, 4)
    store.engine.dispose()


def test_one_worker_process_drains_200_jobs_sqlite(tmp_path):
    url = f"sqlite:///{tmp_path / 'q.db'}"
    store = Store(url)
    store.upgrade()
    ids = submit_jobs(store, 200)
    finish(start_worker(url, "--idle-exit-s", "1"))
    check_drained(store, ids, 1)


def test_sigkilled_worker_job_is_finished_by_another(url):
    store = Store(url)
    [job] = submit_jobs(store, 1)
    q = JobQueue(store)
    victim = start_worker(url, "--lease-s", "2", "--worker-id", "victim", env={"FAKE_EVAL_SLEEP": "60"})
    wait_status(q, job, "running")
    victim.send_signal(signal.SIGKILL)  # mid-job: no release, no more heartbeats
    victim.wait()
    rescuer = Worker(store, "cpu", worker_id="rescuer", lease_s=2, evaluate_fn=fake_evaluate, idle_exit_s=4,
                     idle_sleep_s=0.1)
    t0 = time.monotonic()
    assert rescuer.run() == 1
    assert time.monotonic() - t0 < 4 + 3  # claimed again once the 2 s lease lapsed
    with store.session() as s:
        row = s.get(EvalJobRow, job)
        assert row.status == "done" and row.worker == "rescuer" and row.attempts == 2
        assert s.scalar(select(func.count()).select_from(EvaluationRow)) == 1
    store.engine.dispose()


def test_workers_up_forwards_sigterm_and_a_long_job_is_released(tmp_path):
    """`workers up --cpu 2` starts two worker processes; SIGTERM to it reaches both: the idle one exits, the busy
    one waits --grace-s for its job, then releases it (queued again, the claim not counted) and exits 0.
    (A job that ends within the grace period is finished: tests/test_worker_service.py, in-process.)"""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    store = Store(url)
    store.upgrade()
    [long] = submit_jobs(store, 1)
    p = subprocess.Popen([sys.executable, "-m", "kernelrl.cli", "workers", "up", "--gpus", "none", "--cpu", "2",
                          "--store", url, "--grace-s", "0.5", "--evaluate-fn", FAKE], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, FAKE_EVAL_SLEEP="60"))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True)
    reader.start()
    q = JobQueue(store)
    wait_status(q, long, "running", timeout=60)
    t_end = time.monotonic() + 60  # both workers have their signal handlers (they say so once they do)
    while sum("serving" in ln for ln in lines) < 2 and time.monotonic() < t_end:
        time.sleep(0.1)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    reader.join(10)
    out = "".join(lines)
    assert p.returncode == 0, out
    assert time.monotonic() - t0 < 20
    assert out.count("started worker pid") == 2 and out.count("jobs done") == 2 and "0 jobs done, 1 released" in out
    st = q.status([long])[long]
    assert st.status == "queued" and st.worker is None  # released: another worker takes it
    assert q.claim("next").attempts == 1  # and the release did not count as an attempt


def test_worker_cli_rejects_bad_input(tmp_path):
    url = f"sqlite:///{tmp_path / 'q.db'}"
    for args, msg in ((["--device", "tpu"], "--device must be cpu, cuda, cuda:N or auto"),):
        r = subprocess.run([sys.executable, "-m", "kernelrl.cli", "worker", "--store", url, *args], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr
