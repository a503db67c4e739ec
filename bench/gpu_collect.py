"""Dump what a GPU pipeline run left in the store and its run folder, for bench/gpu_pipeline_report.py to plot.

    python bench/gpu_collect.py --run g1 --out /tmp/collect      # KERNELRL_STORE_URL / KERNELRL_HOME as the run had

Writes (JSONL unless said): jobs (every eval job: purpose, status, worker, claim/finish times, attempts, parent),
evaluations (id, candidate, purpose, score, flags, worker, GPU UUID, the re-verification record), candidates (id,
task, origin stage, run), attempts_by_stage.json (counts), stages.json (the run's stage records), counts.json
(rows per table: the before/after of a fault test), and copies of the run folder's manifests, crl metrics,
fleet.json and logs (evaluator logs cut to their last 400 lines). Reads only; safe while the run goes on.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
from pathlib import Path


def _j(v):
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    return v


def dump(store_url: str | None, run: str, out: Path) -> dict:
    from sqlalchemy import text

    from kernelrl.store import Store

    st = Store(store_url)
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    with st.engine.connect() as c:
        for table in ("tasks", "candidates", "attempts", "evaluations", "eval_jobs", "runs", "stages"):
            try:
                counts[table] = int(c.execute(text(f"select count(*) from {table}")).scalar())
            except Exception as e:  # noqa: BLE001 - a table a newer schema added or dropped
                counts[table] = f"error: {e.__class__.__name__}"
        with open(out / "jobs.jsonl", "w") as f:
            for r in c.execute(text("select id, task_id, candidate_id, purpose, status, worker, exclude_worker, "
                                    "device_type, parent_id, attempts, evaluation_id, error, created_at, "
                                    "claimed_at, finished_at from eval_jobs order by id")).mappings():
                f.write(json.dumps({k: _j(v) for k, v in r.items()}) + "\n")
        with open(out / "evaluations.jsonl", "w") as f:
            for r in c.execute(text("select id, candidate_id, purpose, speedup, executable, correct, flags, "
                                    "device_type, result, created_at from evaluations order by id")).mappings():
                res = r["result"] if isinstance(r["result"], dict) else json.loads(r["result"] or "{}")
                flags = r["flags"] if isinstance(r["flags"], list) else json.loads(r["flags"] or "[]")
                timing = res.get("timing") or {}
                f.write(json.dumps({
                    "id": r["id"], "candidate_id": r["candidate_id"], "purpose": r["purpose"],
                    "speedup": r["speedup"], "executable": r["executable"], "correct": r["correct"], "flags": flags,
                    "device_type": r["device_type"], "worker": res.get("worker"), "gpu_uuid": res.get("gpu_uuid"),
                    "job_id": res.get("job_id"), "wall_s": res.get("wall_s") or timing.get("wall_s"),
                    "reverify": timing.get("reverify"), "created_at": _j(r["created_at"])}) + "\n")
        with open(out / "candidates.jsonl", "w") as f:
            for r in c.execute(text("select id, task_id, origin_stage, run_name, created_at from candidates "
                                    "order by id")).mappings():
                f.write(json.dumps({k: _j(v) for k, v in r.items()}) + "\n")
        by_stage = {f"{r[0]}/{r[1]}": int(r[2]) for r in c.execute(text(
            "select run_name, stage, count(*) from attempts group by run_name, stage"))}
    (out / "attempts_by_stage.json").write_text(json.dumps(by_stage, indent=1))
    stages = {}
    for s in ("augment", "sft", "selfsup", "crl", "bench"):
        rec = st.stage_record(run, s)
        if rec:
            stages[s] = {k: _j(v) for k, v in rec.items()}
    (out / "stages.json").write_text(json.dumps(stages, indent=1, default=str))
    (out / "counts.json").write_text(json.dumps(counts, indent=1))
    return counts


def copy_run_dir(home: Path, run: str, out: Path) -> None:
    rd = home / "runs" / run
    if not rd.is_dir():
        return
    dest = out / "run"
    for p in sorted(rd.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(rd)
        keep = (rel.parts[0] in ("manifests", "logs") or p.name in ("metrics.jsonl", "fleet.json", "crl-metrics.json",
                                                                     "trainer-log.jsonl", "state.json",
                                                                     "train-log.json")
                or "report" in rel.parts)
        if not keep or "checkpoint-" in str(rel) or p.stat().st_size > 8 << 20:
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        if p.suffix == ".log" and p.name.startswith("evaluator-"):
            lines = p.read_text(errors="replace").splitlines()[-400:]
            (dest / rel).write_text("\n".join(lines) + "\n")
        else:
            shutil.copy2(p, dest / rel)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--store", default=None, help="store URL (default: KERNELRL_STORE_URL / the home's SQLite)")
    a = ap.parse_args()
    counts = dump(a.store, a.run, a.out)
    copy_run_dir(Path(os.environ.get("KERNELRL_HOME", ".kernelrl")), a.run, a.out)
    print("collected", json.dumps(counts))


if __name__ == "__main__":
    main()
