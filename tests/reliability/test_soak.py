"""Load: a soak run of the evaluation service on CPU -> every job answered, no leaked processes or temp dirs,
memory stable.

The real ``EvalService`` (SQLite store, two local worker threads, device cpu) and the real sandboxed evaluator
answer 1,000 jobs: every CPU seed of the built-in suite and every CPU red-team candidate (paired with
02_Softmax, as tests/redteam/test_redteam_cpu.py does), distinct variants of them (a unique trailing comment
defeats the store's per-source cache, so each is really evaluated), and duplicates that the service must answer
without timing again: joined while the first job is in flight (same job id) or answered from the store (a new
job born done, ``cached`` true). Two client threads submit in bursts while the workers drain; a third phase
re-submits already-answered sources, which must all come back from the store at once.

Budget: one evaluation at budget_s=0.05, 3 correctness trials costs ~2-4 s of wall time on a shared 2-core
machine (two sandboxed interpreters importing torch dominate). By default 48 distinct sources are evaluated: all
31 red-team candidates and 17 seeds of as many built-in tasks (of 99 CPU seeds). With KERNELRL_SOAK_DISTINCT
above 130 all base sources are evaluated and unique variants of them are added during the first FRESH_S seconds, so that
run stays within ~14 minutes however busy the machine is. The rest of the 1,000 jobs are duplicates.
Sizes: KERNELRL_SOAK_JOBS / _DISTINCT / _FRESH_S / _DEADLINE_S. The figures are printed (line ``SOAK {...}``)
and written as JSON to KERNELRL_SOAK_REPORT when set.

Memory bound: the test process's RSS (after malloc_trim, see ``_trim``), sampled every 30 s, may grow by less
than 150 MB from its floor just after a 60 s warm-up (torch, the store, the first evaluations of each task
size) to its floor over the last samples and to its quiescent value after the service is closed. The
evaluating parent holds one evaluation's reference state and outputs while comparing them: up to ~350 MB for
the largest built-in task (L2/09), which is freed again (measured: every built-in task returns to the same
RSS after gc + malloc_trim). So single samples may sit that far above the floor while a leak of anything per
job (an output set, a session, a result dict per job over ~1,000 jobs) lifts the floor past the bound.
The service layer alone is flat (a fake evaluator: +1.3 MB over 2,800 jobs); what growth the soak shows
(37-87 MB in two runs) is glibc fragmentation from evaluations in per-job threads.

Measured on the shared 2-core machine (two runs): 1,000 jobs answered in 466-482 s, 130-240 distinct sources
really evaluated (155-273 evaluations with re-verifications, 19-35 per minute), 0 leaked processes, 0 temp dirs.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import random
import shutil
import stat
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from sqlalchemy import func, select

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import FATAL
from kernelrl.evaluation.service import EvalRequest, EvalService
from kernelrl.store import Store
from kernelrl.store.models import EvalJobRow, EvaluationRow
from kernelrl.tasks import get_task, load_suite
from kernelrl.tasks.seeds import load_seeds
from tests.redteam.test_redteam_cpu import CAUGHT, EXPECT, FAIL, HERE, HONEST_BOUND, NOISE_FLAGS

pytestmark = pytest.mark.slow

JOBS = int(os.environ.get("KERNELRL_SOAK_JOBS", "1000"))
# At most this many sources really evaluated. 48 (every red-team candidate and seeds of 17 built-in tasks): the full
# 130 base sources plus variants (300) took 822 s of the CI's 90 minutes on a 2-core host with CPU steal
# (2026-11-29, near its 840 s deadline), 72 took 417 s; the 1,000 jobs, joins, store answers and the leak and
# memory checks stay. KERNELRL_SOAK_DISTINCT=300 is the long soak.
DISTINCT = int(os.environ.get("KERNELRL_SOAK_DISTINCT", "48"))
# Variants beyond the base sources are submitted only during the first FRESH_S seconds, so a busy shared
# machine evaluates fewer of them instead of running past the deadline; with DISTINCT above the base sources' count
# the base sources always all run.
FRESH_S = float(os.environ.get("KERNELRL_SOAK_FRESH_S", "420"))
DEADLINE_S = float(os.environ.get("KERNELRL_SOAK_DEADLINE_S", "840"))  # hard bound on the whole soak
DUP_QUOTA = 500  # duplicates from the repeat client at most; the final all-cached phase takes the rest
WORKERS = 2  # local worker threads: one per core of the CI machine (the service's "CPU with cores to spare")
BURST = 10  # distinct sources per burst of the fresh-work client
JOINS_PER_BURST = 2  # in-burst duplicates of that burst's sources: joined to the job just queued
DUP_BURST = 12  # duplicates per burst of the repeat client
REPEAT_EVERY_S = 5.0  # its pace: the duplicates spread over the first minutes of the run
SAMPLE_S = 30.0  # RSS sampling period
WARMUP_S = 60.0  # RSS samples before this are not held to the bound
RSS_GROWTH_BOUND_MB = 150  # see the module docstring
SANDBOX_PREFIXES = ("kernelrl-ref-", "kernelrl-cand-", "kernelrl-eval-", "kernelrl-trial-")  # sandbox.py, api.py
WORKER_MODULE = "kernelrl.evaluation.worker"

# Tiny budget, same rules as the red-team suite: the infinite loop is cut after max(5 s, 50 x reference).
# reverify stays on (the service's default path: speedups above 3x are re-measured by a child job).
CFG = EvalConfig(device="cpu", budget_s=0.05, correctness_trials=3, max_wall_s=90,
                 timeout_factor=50.0, spread_threshold=10.0, memory_limit_mb=4096)
# On a loaded 2-core machine with two evaluations at once, an honest result's re-measurement can also fail (a
# timeout under load: reverify-mismatch; one that disagrees keeps the lower since version 20): a score of 0 then is a
# false alarm, never a faked speedup.
HONEST_NOISE = NOISE_FLAGS | {"reverify-mismatch"}


@dataclass(frozen=True)
class Source:
    idx: int
    task_key: str
    text: str
    kind: str  # "seed" or "redteam"
    name: str  # seed variant or red-team candidate name
    expect: str  # seed: faster/slower/wrong; red team: fail/honest


def _base_sources() -> list[tuple[str, str, str, str, str]]:
    out = []
    for task in load_suite("builtin"):
        for seed in load_seeds(task):
            if seed.device == "any":  # "cuda" seeds need a GPU
                out.append((task.key, seed.source, "seed", f"{task.name}/{seed.name}", seed.expect))
    softmax = get_task("02_Softmax").key
    for name, (kind, _) in sorted(EXPECT.items()):
        out.append((softmax, (HERE / f"{name}.py").read_text(), "redteam", name, kind))
    return out


def _distinct_sources(n: int, rng: random.Random) -> list[Source]:
    """Every base source once (shuffled), then random variants of them; a unique trailing comment makes each one
    a new source. A smaller n takes every red-team candidate and then seeds one task at a time (each built-in task
    once before any twice), so every hostile kind runs and as many task sizes as n leaves room for (17 at 48)."""
    base = _base_sources()
    if n < len(base):
        hostile = [b for b in base if b[2] == "redteam"]
        by_task: dict[str, list] = defaultdict(list)
        for b in base:
            if b[2] == "seed":
                by_task[b[0]].append(b)
        rounds = []
        for seeds in by_task.values():
            rng.shuffle(seeds)
        for depth in range(max(len(v) for v in by_task.values())):
            layer = [v[depth] for v in by_task.values() if depth < len(v)]
            rng.shuffle(layer)
            rounds += layer
        picks = (hostile + rounds)[:n]
        rng.shuffle(picks)
    else:
        picks = rng.sample(base, len(base)) + [rng.choice(base) for _ in range(n - len(base))]
    return [Source(i, key, f"{text.rstrip()}\n# soak variant {i}\n", kind, name, expect)
            for i, (key, text, kind, name, expect) in enumerate(picks)]


def _check_result(src: Source, r: dict) -> str | None:
    """None if the result is what this source should score; else why not."""
    flags = set(r.get("flags") or [])
    fatal = flags & FATAL
    info = (f"{src.kind} {src.name} (variant {src.idx}): success={r.get('success')} correct={r.get('correct')} "
            f"speedup={r.get('speedup')} flags={sorted(flags)} error={(r.get('error') or '')[:300]}")
    if "evaluation-failed" in flags or r.get("evaluation_id") is None:
        return "harness failure: " + info
    if src.kind == "seed":
        if src.expect == "wrong":
            ok = not r["success"] and r["speedup"] == 0.0
        else:  # honest work is correct; its score may be 0 only through a noise flag
            ok = r["executable"] and r["correct"] and (r["speedup"] > 0 or fatal <= HONEST_NOISE)
        return None if ok else info
    kind, allowed = EXPECT[src.name]
    if kind == FAIL or (kind == CAUGHT and fatal & allowed):
        ok = not r["success"] and r["speedup"] == 0.0 and bool(fatal & allowed)
    elif fatal:
        ok = fatal <= allowed | HONEST_NOISE and r["speedup"] == 0.0
    else:
        ok = r["success"] and 0 < r["speedup"] <= HONEST_BOUND
    if ok and kind != FAIL:
        ok = all(f in flags for f in allowed - FATAL - NOISE_FLAGS)
    return None if ok else info


def _sandbox_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(SANDBOX_PREFIXES))


def _ours(p: psutil.Process, root: str, me: int) -> bool:
    """A process this soak started: a descendant of the test process, or one living in its temp root (a
    sandbox worker's cwd and TMPDIR are its private dir there; a daemonised grandchild keeps them)."""
    try:
        if any(a.pid == me for a in p.parents()):
            return True
        if (p.cwd() or "").startswith(root):
            return True
        return (p.environ().get("TMPDIR") or "").startswith(root)
    except (psutil.Error, OSError):
        return False


def _leaked_processes(root: str) -> tuple[list[str], int]:
    """(processes of this soak still alive, sandbox workers on the machine that are not ours: other test runs
    share this machine, so those are only counted)."""
    me = os.getpid()
    out, foreign = [], 0
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        if p.pid == me or p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmd = " ".join(p.info["cmdline"] or [])
        if _ours(p, root, me):  # a sandbox worker (WORKER_MODULE), a candidate's daemon, anything else
            out.append(f"{p.pid}: {cmd[:200]}")
        elif WORKER_MODULE in cmd:
            foreign += 1
    return out, foreign


def _trim() -> None:
    """Give freed heap back to the OS before sampling: glibc keeps freed arenas mapped, so the RSS right after
    an evaluation of a large task is hundreds of MB above what is alive (measured: every built-in task
    returns to the same RSS after gc + malloc_trim), which would hide a real leak in noise."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass


class _RssSampler(threading.Thread):
    def __init__(self, t0: float):
        super().__init__(name="soak-rss", daemon=True)
        self.t0 = t0
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.proc = psutil.Process()

    def sample(self) -> int:
        _trim()
        rss = self.proc.memory_info().rss
        self.samples.append((round(time.monotonic() - self.t0, 1), rss))
        return rss

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            self.sample()


def _request(src: Source, tasks: dict) -> EvalRequest:
    return EvalRequest(tasks[src.task_key], src.text, origin_stage="soak", run_name="soak")


def test_soak_evaluation_service(tmp_path, monkeypatch, request):
    rng = random.Random(20240917)
    sources = _distinct_sources(DISTINCT, rng)
    n_base = min(len(sources), len(_base_sources()))
    tasks = {s.task_key: get_task(s.task_key) for s in sources}

    # A private temp root: every sandbox dir of this soak lands there (counted exactly, whatever else the
    # machine runs). World-traversable: the candidate runs under a fresh unprivileged uid when we are root.
    root = Path(tempfile.mkdtemp(prefix="kernelrl-soakroot-"))
    root.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    monkeypatch.setenv("TMPDIR", str(root))
    dirs_before = _sandbox_dirs(root)
    children_before = {c.pid for c in psutil.Process().children(recursive=True)}

    store = Store(f"sqlite:///{tmp_path / 'soak.db'}")
    store.upgrade()
    t0 = time.monotonic()
    deadline = t0 + DEADLINE_S
    rss = _RssSampler(t0)
    rss.sample()
    rss.start()

    lock = threading.Lock()
    records: list[dict] = []  # one per request: source, phase, job id, its source's first job id
    first_job: dict[int, int] = {}  # source idx -> job id of its first submission
    results_by_job: dict[int, dict] = {}
    errors: list[str] = []
    fresh_done = threading.Event()
    submitted: list[Source] = []

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    def collect(svc: EvalService, ids: list[int]) -> None:
        res = svc.wait(ids, timeout_s=left())
        with lock:
            for j, r in zip(ids, res):
                if r["job_id"] != j:
                    errors.append(f"job {j} answered with job {r['job_id']}'s result")
                results_by_job[j] = r

    def fresh_client(svc: EvalService) -> None:
        """Bursts of distinct sources, each with a couple of in-burst duplicates (which join the job just
        queued); keeps about two bursts queued ahead of the workers. Every base source is submitted; variants
        only while the fresh-work time budget lasts (a busy shared machine evaluates fewer)."""
        r = random.Random(1)
        try:
            pending: list[list[int]] = []
            for b in range(0, len(sources), BURST):
                if b >= n_base and time.monotonic() - t0 > FRESH_S:
                    break
                burst = sources[b:b + BURST]
                extra = [r.choice(burst) for _ in range(JOINS_PER_BURST)]
                ids = svc.submit_many([_request(s, tasks) for s in [*burst, *extra]])
                with lock:
                    for s, j in zip(burst, ids):
                        first_job[s.idx] = j
                        submitted.append(s)
                    for i, (s, j) in enumerate(zip([*burst, *extra], ids)):
                        records.append({"src": s, "phase": "fresh" if i < len(burst) else "join", "job": j,
                                        "orig": first_job[s.idx]})
                pending.append(ids)
                if len(pending) > 2:  # wait for the burst before last: the queue stays ~2 bursts deep
                    collect(svc, pending.pop(0))
            for ids in pending:
                collect(svc, ids)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(f"fresh client: {type(e).__name__}: {e}")
        finally:
            fresh_done.set()

    def repeat_client(svc: EvalService) -> None:
        """Every few seconds a burst of duplicates of sources already submitted (joined while in flight, else
        answered from the store), without waiting for them: they are collected once the fresh work is done."""
        r = random.Random(2)
        pending: list[list[int]] = []
        try:
            sent = 0
            while not fresh_done.wait(REPEAT_EVERY_S) and sent + DUP_BURST <= DUP_QUOTA:
                with lock:
                    known = list(submitted)
                if not known:
                    continue
                picks = [r.choice(known) for _ in range(DUP_BURST)]
                ids = svc.submit_many([_request(s, tasks) for s in picks])
                with lock:
                    for s, j in zip(picks, ids):
                        records.append({"src": s, "phase": "dup", "job": j, "orig": first_job[s.idx]})
                sent += len(ids)
                pending.append(ids)
            for ids in pending:
                collect(svc, ids)
        except BaseException as e:  # noqa: BLE001
            errors.append(f"repeat client: {type(e).__name__}: {e}")

    svc = EvalService(store, CFG, local_workers=WORKERS, device="cpu")
    try:
        threads = [threading.Thread(target=fresh_client, args=(svc,), name="soak-fresh"),
                   threading.Thread(target=repeat_client, args=(svc,), name="soak-repeat")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(left() + 30)
        assert not any(t.is_alive() for t in threads), "a client thread is still running past the deadline"
        assert not errors, errors
        # Final phase: every remaining job re-submits an answered source; all must come from the store at once.
        rest = JOBS - len(records)
        assert rest >= 0, f"the mix overshot {JOBS} jobs: {len(records)}"
        picks = [submitted[rng.randrange(len(submitted))] for _ in range(rest)]
        t_final = time.monotonic()
        ids = svc.submit_many([_request(s, tasks) for s in picks])
        for s, j in zip(picks, ids):
            records.append({"src": s, "phase": "final", "job": j, "orig": first_job[s.idx]})
        collect(svc, ids)
        final_s = time.monotonic() - t_final
        assert not errors, errors
    finally:
        svc.close()
    wall = time.monotonic() - t0
    rss.stop.set()
    rss.join(5)
    gc.collect()
    rss_end = rss.sample()  # quiescent: nothing in flight, the service closed

    # -- every job answered exactly once, with the result its source deserves ----------------------------------
    assert len(records) == JOBS
    assert len({id(r) for r in records}) == JOBS
    unanswered = [r["job"] for r in records if r["job"] not in results_by_job]
    assert not unanswered, f"{len(unanswered)} jobs without a result: {unanswered[:20]}"
    for rec in records:
        rec["result"] = results_by_job[rec["job"]]
    bad = [m for rec in records if (m := _check_result(rec["src"], rec["result"]))]
    assert not bad, f"{len(bad)} results off expectation:\n" + "\n".join(bad[:15])
    # one evaluation per distinct source, shared by all of its jobs
    evals_of: dict[int, set] = defaultdict(set)
    for rec in records:
        evals_of[rec["src"].idx].add(rec["result"]["evaluation_id"])
    assert [k for k, v in evals_of.items() if len(v) > 1] == []
    assert len(evals_of) == len(submitted)
    # duplicates: the same job id while it was in flight (joined), else a new job answered from the store
    for rec in records:
        cached = rec["result"]["cached"]
        if rec["phase"] == "fresh":
            assert rec["job"] == rec["orig"] and cached is False, rec
        elif rec["phase"] in ("join", "dup"):
            assert cached is (rec["job"] != rec["orig"]), rec
        else:
            assert cached is True and rec["job"] != rec["orig"], rec
    assert final_s < 60, f"the all-cached final phase took {final_s:.0f}s"
    stats = store.stats()
    with store.session() as s:
        by_purpose = dict(s.execute(select(EvaluationRow.purpose, func.count()).group_by(EvaluationRow.purpose)).all())
        job_status = dict(s.execute(select(EvalJobRow.status, func.count()).group_by(EvalJobRow.status)).all())
    assert stats["candidates"] == len(submitted)
    assert sum(v for k, v in by_purpose.items() if k != "reverify") == len(submitted), by_purpose
    assert set(job_status) == {"done"}, job_status  # nothing queued, running, verifying or failed is left
    store.engine.dispose()

    # -- no leaked processes, no sandbox temp dirs ---------------------------------------------------------------
    time.sleep(1.0)
    left_children = [c for c in psutil.Process().children(recursive=True)
                     if c.pid not in children_before and c.status() != psutil.STATUS_ZOMBIE]
    leaked, foreign_workers = _leaked_processes(str(root))
    new_dirs = sorted(set(_sandbox_dirs(root)) - set(dirs_before))

    # -- memory ----------------------------------------------------------------------------------------------
    mb = 1024 * 1024
    warm = [v for t, v in rss.samples[:-1] if t >= WARMUP_S]
    # Floors (lowest of a few samples, i.e. when no large evaluation's tensors were alive): a leak lifts the
    # floor; the working set of the evaluations in flight only lifts single samples.
    first_floor = min(warm[:3]) if warm else rss.samples[0][1]
    last_floor = min(warm[-3:]) if warm else rss_end
    floor_growth_mb = (last_floor - first_floor) / mb
    end_growth_mb = (rss_end - first_floor) / mb
    phases = Counter(r["phase"] for r in records)
    report = {
        "jobs": len(records),
        "distinct_job_ids": len({r["job"] for r in records}),
        "distinct_sources_evaluated": len(submitted),
        "base_sources": n_base,
        "evaluations_stored": sum(by_purpose.values()),
        "reverify_evaluations": by_purpose.get("reverify", 0),
        "phases": dict(phases),
        "cached_answers": sum(bool(r["result"]["cached"]) for r in records),
        "joined_answers": sum(r["phase"] in ("join", "dup") and r["job"] == r["orig"] for r in records),
        "workers": WORKERS,
        "wall_s": round(wall, 1),
        "jobs_per_minute": round(len(records) / (wall / 60), 1),
        "evaluations_per_minute": round(sum(by_purpose.values()) / (wall / 60), 1),
        "final_cached_phase_s": round(final_s, 2),
        "rss_start_mb": round(rss.samples[0][1] / mb, 1),
        "rss_end_mb": round(rss_end / mb, 1),
        "rss_max_mb": round(max(v for _, v in rss.samples) / mb, 1),
        "rss_floor_growth_mb": round(floor_growth_mb, 1),
        "rss_end_growth_mb": round(end_growth_mb, 1),
        "rss_samples_mb": [(t, round(v / mb, 1)) for t, v in rss.samples],
        "leaked_processes": len(left_children) + len(leaked),
        "leftover_temp_dirs": len(new_dirs),
        "other_sessions_sandbox_workers_seen": foreign_workers,
        "config": {"budget_s": CFG.budget_s, "correctness_trials": CFG.correctness_trials, "device": "cpu",
                   "min_rounds": CFG.min_rounds, "reverify_above": CFG.reverify_above},
    }
    print("\nSOAK " + json.dumps(report))
    if os.environ.get("KERNELRL_SOAK_REPORT"):
        Path(os.environ["KERNELRL_SOAK_REPORT"]).write_text(json.dumps(report, indent=2) + "\n")

    assert not left_children, [f"{c.pid}: {' '.join(c.cmdline())[:200]}" for c in left_children]
    assert not leaked, leaked
    assert not new_dirs, new_dirs[:20]
    assert floor_growth_mb < RSS_GROWTH_BOUND_MB, report["rss_samples_mb"]
    assert end_growth_mb < RSS_GROWTH_BOUND_MB, report["rss_samples_mb"]
    assert wall < DEADLINE_S
