"""EvalService (the client API) with in-process worker threads: cache hits without re-timing, joined duplicates,
timeouts, failed jobs, compile-ahead; and one pass through the real evaluator with real built-in tasks."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation.jobworker import Worker
from kernelrl.evaluation.precompile import candidate_cache_dir
from kernelrl.evaluation.service import EvalRequest, EvalService
from kernelrl.store.models import EvalJobRow, EvaluationRow
from kernelrl.store.queue import JobQueue
from tests._fake_eval import fake_evaluate
from tests.test_queue import submit_jobs
from tests.test_store import make_task

CFG = EvalConfig(device="cpu", reverify=False)


def counting_fake():
    calls = []

    def fn(task_source, cand_source, cfg):
        calls.append(cand_source)
        return fake_evaluate(task_source, cand_source, cfg)

    return fn, calls


def test_duplicates_are_answered_from_the_store_without_retiming(store):
    fn, calls = counting_fake()
    task = make_task()
    with EvalService(store, CFG, local_workers=1, evaluate_fn=fn, evaluator_version="fake-1") as svc:
        first = svc.evaluate_many([EvalRequest(task, "# a\n"), EvalRequest(task, "# b\n"),
                                   EvalRequest(task, "# a\n")], timeout_s=30)  # the same source twice in a batch
        assert len(calls) == 2  # the in-batch duplicate joined the queued job (or, if done already, the store)
        assert first[0]["evaluation_id"] == first[2]["evaluation_id"]
        again = svc.evaluate_many([EvalRequest(task, "# a\n"), EvalRequest(task, "# b\n")], timeout_s=30)
        assert len(calls) == 2  # answered from the store: nothing re-timed
        assert all(r["cached"] for r in again) and not any(r["cached"] for r in first)
        assert [r["evaluation_id"] for r in again] == [first[0]["evaluation_id"], first[1]["evaluation_id"]]
        assert again[0]["candidate_id"] == first[0]["candidate_id"] and again[0]["speedup"] == 1.5
        final = svc.evaluate_many([EvalRequest(task, "# a\n", purpose="final")], timeout_s=30)
        assert len(calls) == 3 and not final[0]["cached"]  # a final score needs a final evaluation
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(EvaluationRow)) == 3
        cached_jobs = s.scalars(select(EvalJobRow).where(EvalJobRow.worker == "cache")).all()
        assert len(cached_jobs) == 2 and all(j.status == "done" for j in cached_jobs)


def test_another_evaluator_version_or_device_type_is_not_a_hit(store):
    fn, calls = counting_fake()
    task = make_task()
    with EvalService(store, CFG, local_workers=1, evaluate_fn=fn, evaluator_version="fake-1") as svc:
        svc.evaluate_many([EvalRequest(task, "# a\n")], timeout_s=30)
    with EvalService(store, CFG, local_workers=1, evaluate_fn=fn, evaluator_version="fake-2") as svc:
        [r] = svc.evaluate_many([EvalRequest(task, "# a\n")], timeout_s=30)
    assert len(calls) == 2 and not r["cached"]


def test_wait_times_out_naming_pending_jobs_and_collects_later(store):
    task = make_task()
    svc = EvalService(store, CFG, local_workers=0, evaluator_version="fake-1")
    ids = svc.submit_many([EvalRequest(task, "# x\n"), EvalRequest(task, "# y\n")])
    with pytest.raises(TimeoutError) as e:
        svc.wait(ids, timeout_s=0.3)
    assert str(ids[0]) in str(e.value) and str(ids[1]) in str(e.value)
    w = Worker(store, "cpu", worker_id="late", evaluate_fn=fake_evaluate, idle_exit_s=0.5, idle_sleep_s=0.05)
    assert w.run() == 2
    assert [r["success"] for r in svc.wait(ids, timeout_s=5)] == [True, True]


def test_harness_failure_is_retried_then_reported(store):
    def broken(task_source, cand_source, cfg):
        raise RuntimeError("reference worker died")

    task = make_task()
    with EvalService(store, CFG, local_workers=1, evaluate_fn=broken, evaluator_version="fake-1") as svc:
        [r] = svc.evaluate_many([EvalRequest(task, "# z\n")], timeout_s=30)
    assert r["success"] is False and r["flags"] == ["evaluation-failed"] and "reference worker died" in r["error"]
    with store.session() as s:
        assert s.scalar(select(EvalJobRow.attempts)) == 3  # retried up to max attempts


def test_forced_reverify_with_one_local_worker_runs_in_fresh_processes(store):
    fn, calls = counting_fake()
    task = make_task()
    with EvalService(store, CFG, local_workers=1, evaluate_fn=fn, evaluator_version="fake-1") as svc:
        [r] = svc.evaluate_many([EvalRequest(task, "# fake-speedup: 1.3\n", purpose="reverify")], timeout_s=30)
    assert len(calls) == 2
    rv = r["timing"]["reverify"]
    assert rv["mode"] == "fresh-process" and rv["agree"] and r["speedup"] == 1.3


def test_compile_ahead_prebuilds_the_next_candidate_in_the_sandbox(tmp_path, request):
    """While job 1 is 'timed', the worker imports job 2's candidate (it mentions load_inline) in the evaluator's
    sandboxed process, whose module-level code runs there: the marker lands in the shared compile cache."""
    from kernelrl.store import Store

    store = Store(f"sqlite:///{tmp_path / 'q.db'}")  # the mechanism does not depend on the backend
    store.upgrade()
    # Not under tmp_path (mode 0700 parents): the candidate runs as an unprivileged uid and must reach the cache.
    cache = Path(tempfile.mkdtemp(prefix="kernelrl-test-cache-"))
    cache.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(cache, ignore_errors=True))
    cfg = EvalConfig(device="cpu", reverify=False, cache_dir=str(cache))
    q = JobQueue(store)
    tid = store.upsert_task(make_task())
    settings = {**cfg.__dict__}
    slow = "# fake-speedup: 1.1\n"
    builds = ("import os  # load_inline would build here\n"
              "cache = os.path.dirname(os.environ['TORCH_EXTENSIONS_DIR'])  # this source's compile cache\n"
              "open(os.path.join(cache, 'imported'), 'w').write(str(os.getuid()))\n"
              "class ModelNew:\n    def __init__(self, n):\n        pass\n")
    marker = candidate_cache_dir(builds, cfg) / "imported"  # where the timed evaluation will find its builds

    seen_before_turn = []

    def fn(task_source, cand_source, c):
        if cand_source == builds:
            seen_before_turn.append(marker.exists())
        if cand_source == slow:  # job 1 "times" until job 2's pre-build has run (at most 60 s)
            t_end = time.monotonic() + 60
            while not marker.exists() and time.monotonic() < t_end:
                time.sleep(0.1)
        return fake_evaluate(task_source, cand_source, c)

    j1 = q.submit(tid, store.add_candidate(tid, slow, origin_stage="seed"), settings)
    j2 = q.submit(tid, store.add_candidate(tid, builds, origin_stage="seed"), settings)
    w = Worker(store, "cpu", worker_id="w", evaluate_fn=fn, precompile="always", idle_exit_s=0.3, idle_sleep_s=0.05)
    assert w.run() == 2
    assert marker.exists(), w.precompile_log
    time.sleep(0.5)  # the pool thread records its entry just after the sandbox exits
    entry = next(e for e in w.precompile_log if e["job_id"] == j2)
    assert entry["ok"] and entry["how"] in ("sandboxed import", "evaluator hook"), entry
    assert seen_before_turn == [True]  # pre-built while job 1 was still running, before its own turn
    assert all(e["job_id"] != j1 for e in w.precompile_log)
    if entry.get("uid") is not None:
        assert marker.read_text() == str(entry["uid"]) != "0"  # the candidate's own unprivileged uid


def test_cpu_workers_do_not_compile_ahead_by_default(tmp_path):
    w = Worker(f"sqlite:///{tmp_path / 'q.db'}", "cpu", evaluate_fn=fake_evaluate)
    assert w.precompile is False and w._pool is None


def factor_fake(factor: float, calls: list):
    def fn(task_source, cand_source, cfg):
        calls.append(cand_source)
        r = fake_evaluate(task_source, cand_source, cfg)
        r["speedup"] = round(r["speedup"] * factor, 2)
        return r

    return fn


def run_workers(*workers: Worker) -> None:
    threads = [threading.Thread(target=w.run) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def test_reverify_goes_to_the_other_worker_and_must_agree(store):
    """A speedup above reverify_above is re-measured by a different worker: 5.0 vs 5.1 agree (kept: the lower),
    5.0 vs 2.5 do not (flagged reverify-disagreed, the lower kept); below the threshold nothing is re-measured;
    the evaluator's own in-process re-verification is off inside workers."""
    q = JobQueue(store)
    tid = store.upsert_task(make_task())
    settings = {"device": "cpu", "reverify": True, "reverify_above": 3.0, "reverify_tolerance": 0.1}
    agree = q.submit(tid, store.add_candidate(tid, "# fake-speedup: 5.0\n", origin_stage="seed"), settings)
    plain = q.submit(tid, store.add_candidate(tid, "# fake-speedup: 1.2\n", origin_stage="seed"), settings)
    calls_a, calls_b = [], []
    a = Worker(store, "cpu", worker_id="A", evaluate_fn=factor_fake(1.0, calls_a), reverify_wait_s=60,
               idle_exit_s=0.5, idle_sleep_s=0.05)
    a.run()  # A measures both; the 5.0 waits for another worker (A is excluded for 60 s)
    assert q.status([agree])[agree].status == "verifying" and q.status([plain])[plain].status == "done"
    b = Worker(store, "cpu", worker_id="B", evaluate_fn=factor_fake(1.02, calls_b), idle_exit_s=0.5,
               idle_sleep_s=0.05)
    b.run()
    assert len(calls_a) == 2 and len(calls_b) == 1
    mismatch = q.submit(tid, store.add_candidate(tid, "# fake-speedup: 5.0\n# 2", origin_stage="seed"), settings)
    a.run()
    Worker(store, "cpu", worker_id="C", evaluate_fn=factor_fake(0.5, []), idle_exit_s=0.5, idle_sleep_s=0.05).run()
    with store.session() as s:
        ev = s.get(EvaluationRow, s.get(EvalJobRow, agree).evaluation_id)
        rv = ev.result["timing"]["reverify"]
        assert rv["agree"] and rv["worker"] == "B" and rv["first_worker"] == "A" and rv["mode"] == "other-worker"
        assert ev.speedup == 5.0 and ev.result["success"] and ev.purpose == "reward"  # min(5.0, 5.1)
        assert ev.result["reverify_setting"] is False  # the evaluator's own re-verification is off in workers
        assert "reverify" not in s.get(EvaluationRow, s.get(EvalJobRow, plain).evaluation_id).result["timing"]
        ev = s.get(EvaluationRow, s.get(EvalJobRow, mismatch).evaluation_id)
        # 2.5 against 5.0 (no intervals): they disagree, the lower is kept and flagged (version 20: 0 before)
        assert ev.speedup == 2.5 and "reverify-disagreed" in ev.flags and ev.result["success"]
        assert "reverify-mismatch" not in ev.flags and ev.result["timing"]["reverify"]["kept"] == 2.5
        assert ev.result["timing"]["reverify"]["speedup"] == 2.5 and ev.result["timing"]["reverify"]["worker"] == "C"
        assert s.scalar(select(func.count()).select_from(EvaluationRow).where(EvaluationRow.purpose == "reverify")) == 2


def test_lone_worker_reverifies_itself_after_the_window(store):
    q = JobQueue(store)
    tid = store.upsert_task(make_task())
    settings = {"device": "cpu", "reverify": True, "reverify_above": 3.0}
    jid = q.submit(tid, store.add_candidate(tid, "# fake-speedup: 4.0\n", origin_stage="seed"), settings)
    calls = []
    Worker(store, "cpu", worker_id="solo", evaluate_fn=factor_fake(1.0, calls), reverify_wait_s=0.5,
           idle_exit_s=1.5, idle_sleep_s=0.05).run()
    with store.session() as s:
        ev = s.get(EvaluationRow, s.get(EvalJobRow, jid).evaluation_id)
        rv = ev.result["timing"]["reverify"]
        assert rv["mode"] == "fresh-process" and rv["worker"] == "solo" and rv["agree"] and ev.speedup == 4.0
    assert len(calls) == 2


def test_stop_finishes_a_job_that_ends_within_the_grace_period(store):
    [jid] = submit_jobs(store, 1)
    stop = threading.Event()

    def slow(task_source, cand_source, cfg):
        stop.set()  # "SIGTERM" arrives while the job runs
        time.sleep(1.0)
        return fake_evaluate(task_source, cand_source, cfg)

    w = Worker(store, "cpu", evaluate_fn=slow, stop_event=stop, grace_s=20, idle_sleep_s=0.05)
    assert w.run() == 1 and w.released == 0
    assert JobQueue(store).status([jid])[jid].status == "done"


def test_close_releases_or_finishes_running_jobs(store):
    fn, _ = counting_fake()
    task = make_task()
    svc = EvalService(store, CFG, local_workers=1, evaluate_fn=fn, evaluator_version="fake-1")
    ids = svc.submit_many([EvalRequest(task, f"# {i}\n") for i in range(3)])
    svc.wait(ids[:1], timeout_s=30)
    t = threading.Thread(target=svc.close)
    t.start()
    t.join(30)
    st = JobQueue(store).status(ids)
    assert all(s.status in ("done", "queued") for s in st.values())


@pytest.mark.postgres
def test_real_evaluator_through_the_service(pg_url):
    """Two built-in tasks through the real evaluator (sandboxed processes, paired timing) on the real Postgres;
    the second submission of the same sources is answered from the store."""
    from kernelrl.evaluation import EVALUATOR_VERSION
    from kernelrl.store import Store
    from kernelrl.tasks import get_task, load_seeds

    store = Store(pg_url)
    store.upgrade()
    reqs = []
    for name, purpose in (("09_Swish", "reward"), ("04_GELU_Tanh", "final")):
        task = get_task(name)
        seed = next(s for s in load_seeds(task) if s.device == "any")
        reqs.append(EvalRequest(task, seed.source, origin_stage="seed", purpose=purpose))
    cfg = EvalConfig(device="cpu", budget_s=0.2, correctness_trials=2, reverify=False, min_rounds=7)
    with EvalService(store, cfg, local_workers=2) as svc:  # two at once: the suite's wall time, not a timing claim
        first = svc.evaluate_many(reqs, timeout_s=240)
        again = svc.evaluate_many(reqs, timeout_s=10)
    for r in first:
        assert r["evaluator_version"] == EVALUATOR_VERSION and r["device_type"] == "cpu" and r["executable"]
        assert r["timing"].get("rounds", 0) >= 7 and not r["cached"] and r["worker"].startswith("local-")
    # the eager estimate (report only) for the final evaluation, not for the policy's reward
    assert "eager" not in first[0]["timing"] and first[1]["timing"]["eager"]["cand_ms"] > 0, first
    assert all(a["cached"] and a["evaluation_id"] == f["evaluation_id"] for a, f in zip(again, first))
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(EvaluationRow)) == 2
    store.engine.dispose()


def test_decide_reverify_uses_the_intervals_and_says_what_was_kept():
    """The queue's re-verification (another worker's measurement) applies stats.reverify_verdict: overlapping
    intervals keep the lower of the two; disjoint ones keep it too, flagged reverify-disagreed with both numbers in
    timing; a re-measurement that failed scores 0 (reverify-mismatch, the numbers in the error)."""
    from kernelrl.evaluation.jobworker import decide_reverify

    first = {"success": True, "speedup": 3.8, "flags": [], "timing": {"ci_low": 3.8, "ci_high": 4.3,
                                                                      "ref_median_ms": 2.0}}
    second = {"success": True, "speedup": 3.03, "timing": {"ci_low": 3.03, "ci_high": 3.9, "ref_median_ms": 2.0}}
    out = decide_reverify(first, second, 0.10, mode="other-worker", who={"worker": "B"})
    rv = out["timing"]["reverify"]
    assert out["speedup"] == 3.03 and out["success"] and "reverify-mismatch" not in out["flags"]
    assert rv["agree"] and rv["rule"] == "intervals-overlap" and rv["kept"] == 3.03 and rv["worker"] == "B"
    assert rv["interval"] == (3.03, 3.9) and first["timing"].get("reverify") is None  # the input is not mutated
    second["timing"]["ci_high"] = 3.4
    out = decide_reverify(first, second, 0.10, mode="other-worker", who={"worker": "B"})
    rv = out["timing"]["reverify"]
    assert out["speedup"] == 3.03 and out["success"] and out["flags"] == ["reverify-disagreed"], out
    assert rv["rule"] == "mismatch" and rv["kept"] == 3.03 and not rv["agree"] and not out.get("error")
    assert rv["why"].startswith("first 3.8x [3.8, 4.3], re-measured 3.03x [3.03, 3.4]"), rv["why"]
    # the second's timing detail (report only) rides along: what it timed, not the first's
    assert rv["detail"] == {"ref_median_ms": 2.0}, rv["detail"]
    second["timing"].update(cand_median_ms=0.66, harness_charge_ms=0.2, rounds_raw={"big": [0.0] * 10})
    rv = decide_reverify(first, second, 0.10, mode="other-worker", who={"worker": "B"})["timing"]["reverify"]
    assert rv["detail"] == {"ref_median_ms": 2.0, "cand_median_ms": 0.66, "harness_charge_ms": 0.2}, rv["detail"]
    out = decide_reverify(first, dict(second, success=False), 0.10, mode="other-worker", who={"worker": "B"})
    assert out["speedup"] == 0.0 and not out["success"] and out["flags"] == ["reverify-mismatch"]
    assert out["error"].startswith("reverify-mismatch: first 3.8x [3.8, 4.3], re-measured 3.03x [3.03, 3.4]")
    assert out["timing"]["reverify"]["rule"] == "failed" and out["timing"]["reverify"]["kept"] == 0.0
    # why it failed is recorded: a fatal flag alone (no error), or the second's error
    failed = dict(second, success=False, flags=["unstable-timing", "reference-slowed"], error=None)
    rv = decide_reverify(first, failed, 0.10, mode="other-worker", who={"worker": "B"})["timing"]["reverify"]
    assert rv["flags"] == ["unstable-timing", "reference-slowed"] and rv["error"] is None and not rv["success"]
    assert "did not succeed (reference-slowed); kept 0" in rv["why"], rv["why"]
    failed.update(flags=["timeout"], error="cache in use by another worker\ntraceback")
    rv = decide_reverify(first, failed, 0.10, mode="other-worker", who={"worker": "B"})["timing"]["reverify"]
    assert "did not succeed (timeout; cache in use by another worker); kept 0" in rv["why"], rv["why"]


def test_a_task_whose_reference_cannot_load_fails_once_not_three_times(store):
    """A reference that raises the same error at every load (a module missing on this host, a name error in the
    task file) is the task's fault: one attempt, a clear error, no retries that each cost a worker's start."""
    task = make_task()
    broken = task.source.replace("import torch", "import torch\nimport kernelrl_no_such_module", 1)
    task = task.__class__(**{**task.__dict__, "source": broken})
    cfg = EvalConfig(device="cpu", budget_s=0.3, correctness_trials=2, reverify=False, max_wall_s=60)
    with EvalService(store, cfg, local_workers=1, evaluator_version="fake-1") as svc:
        [r] = svc.evaluate_many([EvalRequest(task, task.source.replace("class Model(", "class ModelNew("))],
                                timeout_s=120)
    assert r["success"] is False and "kernelrl_no_such_module" in r["error"], r
    with store.session() as s:
        assert s.scalar(select(EvalJobRow.attempts)) == 1
