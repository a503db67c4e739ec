"""Fault injection for a GPU pipeline run: SIGKILL one evaluator worker while it holds a job, then the crl step
mid-run, and record the store's row counts before and after (bench/gpu_pipeline.sh starts this beside the run).

    python bench/gpu_faults.py --run g1 --at-step 23 --out /tmp/krl/faults.json

Waits until the crl stage's metrics.jsonl has ``--at-step`` lines (past a checkpoint: crl.save_steps), then:
1. picks a job in status ``running`` whose worker belongs to the run's fleet (``<home>/runs/<run>/fleet.json``),
   records it, and SIGKILLs that worker's process (its lease lapses; another worker must take the job over);
2. SIGKILLs the crl step's processes (``-m steps.crl``; the flow retries the stage, which resumes from its
   newest checkpoint);
3. writes what it did, with row counts of evaluations / jobs / attempts / candidates at that moment.
bench/gpu_pipeline_report.py checks the outcome after the run: the killed job finished by another worker, one
evaluation per job, no duplicate reward evaluation of a candidate, the crl resumed from a checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path


def counts(store) -> dict[str, int]:
    from sqlalchemy import text

    with store.engine.connect() as c:
        return {t: int(c.execute(text(f"select count(*) from {t}")).scalar())
                for t in ("evaluations", "eval_jobs", "attempts", "candidates")}


def running_job(store, worker_ids: set[str]):
    from sqlalchemy import text

    with store.engine.connect() as c:
        for r in c.execute(text("select id, worker, candidate_id, purpose, claimed_at from eval_jobs "
                                "where status = 'running' order by claimed_at")).mappings():
            if r["worker"] in worker_ids:
                return dict(r)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--at-step", type=int, default=23)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timeout-s", type=float, default=3600)
    a = ap.parse_args()
    from kernelrl.store import Store

    home = Path(os.environ.get("KERNELRL_HOME", ".kernelrl"))
    rd = home / "runs" / a.run
    metrics = rd / "crl" / "metrics.jsonl"
    store = Store(None)
    t_end = time.monotonic() + a.timeout_s
    rec: dict = {"run": a.run, "at_step": a.at_step}
    while time.monotonic() < t_end:
        n = len(metrics.read_text().splitlines()) if metrics.exists() else 0
        if n >= a.at_step:
            break
        time.sleep(2)
    else:
        rec["error"] = "crl never reached the step"
        a.out.write_text(json.dumps(rec, indent=1))
        return
    fleet = json.loads((rd / "fleet.json").read_text())
    by_id = {w["worker_id"]: w for w in fleet["workers"]}
    rec["counts_before"] = counts(store)
    job = None
    for _ in range(300):  # wait (up to ~60 s) for a fleet worker to hold a job
        job = running_job(store, set(by_id))
        if job:
            break
        time.sleep(0.2)
    if job:
        w = by_id[job["worker"]]
        os.kill(w["pid"], signal.SIGKILL)
        rec["killed_worker"] = {**w, "job": {k: str(v) for k, v in job.items()}, "t": time.time()}
    else:
        rec["killed_worker"] = None
    time.sleep(3)
    import psutil

    killed = []
    for proc in psutil.process_iter(["pid", "cmdline"]):  # the crl step (and its ranks under accelerate)
        cmd = proc.info["cmdline"] or []
        if "steps.crl" in cmd and "-m" in cmd:
            try:
                proc.send_signal(signal.SIGKILL)
                killed.append({"pid": proc.pid, "cmdline": " ".join(cmd)[:200]})
            except psutil.Error:
                pass
    rec["killed_crl_pids"] = killed
    rec["crl_steps_logged_at_kill"] = len(metrics.read_text().splitlines()) if metrics.exists() else 0
    rec["t_crl_kill"] = time.time()
    rec["counts_after_kill"] = counts(store)
    a.out.write_text(json.dumps(rec, indent=1))
    print("faults:", json.dumps(rec))


if __name__ == "__main__":
    main()
