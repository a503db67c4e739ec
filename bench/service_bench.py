"""Evaluation service benchmark: throughput of one GPU worker vs one worker per GPU over a batch of seed-corpus
candidates (the scaling factor), and one forced re-verification that must run on the other GPU.

    python bench/service_bench.py --gpus 0,1 --out bench/results/service_h200x2.json
    python bench/service_bench.py --gpus 0,1 --n 48 --budget-s 1 --correctness-trials 10 --max-minutes 20 --out ...
    python bench/service_bench.py --gpus cpu --cpu-workers 2 --n 6 --budget-s 0.2 --correctness-trials 2   # CPU smoke
    # one batch over three device calls (the 1-GPU phase of 102 jobs takes ~13 min; a call allows 10):
    python bench/service_bench.py --gpus 3 --only-single --part 1/2 --n 102 ... --out single1.json   # call 1
    python bench/service_bench.py --gpus 3 --only-single --part 2/2 --n 102 ... --out single2.json   # call 2
    python bench/service_bench.py --gpus 1,2,3 --skip-single --n 102 ... --out multi.json            # call 3
    python bench/service_bench.py --combine single1.json single2.json multi.json --out fleet.json     # here

On this workplace's GPU machines (no registry there; python3 holds torch): the store needs SQLAlchemy, alembic,
Mako and pydantic(-settings) wheels, kept in the ignored .whl/ folder; carry it and start the command with
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 && python3 bench/service_bench.py ...

What it does (target, issue "evaluation service": >= 1.8x with two GPUs, one re-verification on the other GPU):
1. Picks N seed candidates (kernelrl/tasks/builtin/seeds), round-robin over the built-in tasks so every task
   appears before any repeats (on CPU only the plain-PyTorch seeds). Warms the compile cache first (their
   load_inline builds, in parallel, reported apart), so both phases time evaluation, not nvcc; --cold skips it.
2. Phase "single": a fresh store (SQLite by default: no server needed, several worker processes share it), one
   `kernelrl worker` process on the first device; the whole batch is submitted at once and drained. Phase
   "multi": another fresh store, one worker process per device, the same batch. Throughput = jobs finished /
   (last finish - first claim), from the job rows; scaling = multi / single. Re-verification is off in both
   phases so that only the batch is timed, unless --reverify (a training run's service: high speedups are
   measured twice, on another GPU in the multi phase; each phase lists both GPUs). --max-minutes bounds the whole
   run (60% of what is left after the warm-up goes to the single phase): a phase cut short reports the rate of
   the jobs that finished (partial).
3. Re-verification: with the multi workers still up, the best successful candidate of the batch is submitted
   with purpose 'reverify' (forced); the worker that measures it excludes its own GPU (UUID) from the
   re-measurement for --reverify-wait-s, so another GPU's worker takes it; the report names both workers,
   their GPUs and the mode ('other-gpu' expected).

Prints a Markdown report and writes JSON to --out (date, host, devices, command, settings, per-phase rows).
Worker logs, stores and the compile cache live in --work-dir. Exit 0 when it ran (whatever the numbers);
1 if a worker did not start or the re-verification did not finish in time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelrl.config.stages import EvalConfig  # noqa: E402
from kernelrl.evaluation.precompile import BUILD_MARKERS, pin_cuda_arch, precompile  # noqa: E402
from kernelrl.evaluation.service import EvalRequest, EvalService  # noqa: E402
from kernelrl.store import Store  # noqa: E402
from kernelrl.store.models import EvalJobRow  # noqa: E402
from kernelrl.tasks import load_seeds, load_suite  # noqa: E402


def pick_candidates(n: int, cuda: bool, expects: set[str], max_builds: int | None = None):
    """N seeds, round-robin over the tasks (GPU seeds first on each task); at most ``max_builds`` of them with
    an extension build (load_inline/Triton: each costs an nvcc build in the warm-up, ~30-60 s on the H100 host)."""
    per_task = []
    for t in load_suite("builtin"):
        seeds = [s for s in load_seeds(t) if s.expect in expects and (cuda or s.device == "any")]
        seeds.sort(key=lambda s: (s.device != "cuda", s.name))  # GPU seeds first on each task
        per_task.append([(t, s) for s in seeds])
    out, i, builds = [], 0, 0
    while len(out) < n and any(i < len(p) for p in per_task):
        for p in per_task:
            if i < len(p):
                builds_it = any(m in p[i][1].source for m in BUILD_MARKERS)
                if builds_it and max_builds is not None and builds >= max_builds:
                    continue
                builds += builds_it
                out.append(p[i])
        i += 1
    return out[:n]


def start_worker(device: str, url: str, work: Path, tag: str, reverify_wait_s: float,
                 index: int) -> tuple[subprocess.Popen, Path]:
    log = work / f"worker-{tag}-{index}-{device.replace(':', '')}.log"
    wid = f"bench-{tag}-{socket.gethostname()}-{index}-{device}"  # unique: CPU workers are known by their id
    cmd = [sys.executable, "-m", "kernelrl.cli", "worker", "--device", device, "--store", url, "--worker-id", wid,
           "--lease-s", "60", "--idle-sleep-s", "0.1", "--reverify-wait-s", str(reverify_wait_s), "--grace-s", "5"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    return p, log


def wait_serving(procs, timeout_s: float = 300) -> None:
    t_end = time.monotonic() + timeout_s
    for p, log in procs:
        while "serving" not in log.read_text():
            if p.poll() is not None:
                raise RuntimeError(f"worker exited {p.returncode} at start: {log.read_text()[-2000:]}")
            if time.monotonic() > t_end:
                raise TimeoutError(f"worker did not start within {timeout_s}s: {log}")
            time.sleep(0.2)


def stop_workers(procs) -> None:
    for p, _ in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p, _ in procs:
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()


def job_rows(store: Store, ids: list[int]) -> list[EvalJobRow]:
    from sqlalchemy import select

    with store.session() as s:
        return list(s.scalars(select(EvalJobRow).where(EvalJobRow.id.in_(ids))))


def aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def phase_stats(name: str, devices: list[str], rows: list[EvalJobRow], results, wall: float, partial: bool):
    done = [r for r in rows if r.status in ("done", "failed") and r.finished_at and r.claimed_at]
    span = ((max(aware(r.finished_at) for r in done) - min(aware(r.claimed_at) for r in done)).total_seconds()
            if done else 0.0)
    per_worker: dict[str, int] = {}
    for r in done:
        per_worker[r.worker] = per_worker.get(r.worker, 0) + 1
    twice = [(r.get("timing") or {}).get("reverify") for r in (results or [])]
    twice = [{"first_gpu": t.get("first_gpu_uuid") or t.get("first_worker"), "second_gpu": t.get("gpu_uuid")
              or t.get("worker"), "mode": t.get("mode"), "first": t.get("first_speedup"), "second": t.get("speedup"),
              "agree": t.get("agree")} for t in twice if t]
    for t in twice:
        t["other_gpu"] = bool(t["second_gpu"]) and t["second_gpu"] != t["first_gpu"]
    by_id = {r.id: r for r in done}
    # each job's service seconds (claim -> finish) in batch order, None where it did not finish: lets a phase cut
    # short be compared with the other on the very same jobs (main: scaling_same_jobs)
    service = [round((aware(by_id[i].finished_at) - aware(by_id[i].claimed_at)).total_seconds(), 3)
               if i in by_id else None for i in sorted(r.id for r in rows)]
    return {"phase": name, "workers": len(devices), "devices": devices, "jobs": len(rows), "finished": len(done),
            "service_s": service,
            "reverified": twice, "reverified_on_other_gpu": sum(t["other_gpu"] for t in twice),
            "partial": partial, "wall_s": round(wall, 2), "span_s": round(span, 2),
            "jobs_per_hour": round(len(done) / span * 3600, 1) if span > 0 else None,
            "per_worker_jobs": per_worker,
            "success": sum(1 for r in results if r.get("success")) if results is not None else None,
            "failed_jobs": sum(1 for r in done if r.status == "failed")}


_UPGRADE_LOCK = threading.Lock()


def run_phase(name: str, devices: list[str], cands, cfg: EvalConfig, work: Path, url: str | None,
              timeout_s: float, reverify_wait_s: float, keep_up: bool = False):
    """One phase on a fresh store (unless --store): workers up, the batch submitted at once, drained (or cut at
    timeout_s: then the throughput of the jobs that finished, marked partial)."""
    url = url or f"sqlite:///{work / f'store-{name}.db'}"
    store = Store(url)
    with _UPGRADE_LOCK:  # alembic's migration context is process-global: one upgrade at a time (--concurrent)
        store.upgrade()
    procs = [start_worker(d, url, work, name, reverify_wait_s, i) for i, d in enumerate(devices)]
    try:
        wait_serving(procs)
        # use_cache=False: with one --store for both phases the batch must be timed again, not looked up
        svc = EvalService(store, cfg, local_workers=0, device=devices[0], use_cache=False)
        t0 = time.monotonic()
        ids = svc.submit_many([EvalRequest(t, s.source, origin_stage="seed", purpose="bench") for t, s in cands])
        results, partial = None, False
        try:
            results = svc.wait(ids, timeout_s=max(1.0, timeout_s - (time.monotonic() - t0)))
        except TimeoutError:
            partial = True
        wall = time.monotonic() - t0
        rows = job_rows(store, ids)
        if partial:  # keep what finished; the rest is cancelled so that the workers are free again
            svc.queue.cancel(ids, "benchmark time limit")
            finished = {r.id for r in rows if r.status in ("done", "failed")}
            got = dict(zip(sorted(finished), svc.wait(sorted(finished), timeout_s=30))) if finished else {}
            results = [got.get(j, {}) for j in ids]
        phase = phase_stats(name, devices, rows, results, wall, partial)
        extra = {"store": store, "svc": svc, "procs": procs, "results": results or []}
        if not keep_up:
            stop_workers(procs)
        return phase, extra
    except BaseException:
        stop_workers(procs)
        raise


def same_jobs(single: dict, multi: dict) -> dict:
    """When the single phase was cut short, its rate and the multi phase's come from different job mixes. On the jobs
    BOTH finished: the mean service seconds per job in each phase, and the scaling those imply with every worker
    busy (workers x single mean / multi mean): how much slower a job gets beside others; queue and idle gaps are
    what the throughput ratio adds to it."""
    a, b = single.get("service_s") or [], multi.get("service_s") or []
    both = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    if not both:
        return {}
    ma, mb = sum(x for x, _ in both) / len(both), sum(y for _, y in both) / len(both)
    return {"same_jobs": {"jobs": len(both), "single_mean_s": round(ma, 3), "multi_mean_s": round(mb, 3),
                          "scaling_same_jobs": round(multi["workers"] * ma / mb, 3) if mb > 0 else None}}


def reverify_demo(extra, cands, cfg: EvalConfig, timeout_s: float, earlier: list | None = None):
    """``earlier``: the single phase's results, used where the multi phase did not finish a candidate."""
    results = [m or e for m, e in zip(extra["results"] or [{} for _ in cands], earlier or [{} for _ in cands])]
    ok = [(r.get("speedup") or 0.0, i) for i, r in enumerate(results) if r.get("success")]
    if not ok:
        return {"ran": False, "why": "no successful candidate in the batch"}
    _, i = max(ok)
    t, s = cands[i]
    svc: EvalService = extra["svc"]
    [r] = svc.evaluate_many([EvalRequest(t, s.source, origin_stage="seed", purpose="reverify", priority=100)],
                            timeout_s=timeout_s)
    rv = (r.get("timing") or {}).get("reverify") or {}
    return {"ran": True, "task": t.key, "seed": s.name, "first_worker": rv.get("first_worker"),
            "first_gpu_uuid": rv.get("first_gpu_uuid"), "reverify_worker": rv.get("worker"),
            "reverify_device": rv.get("device"), "reverify_gpu_uuid": rv.get("gpu_uuid"), "mode": rv.get("mode"),
            "first_speedup": rv.get("first_speedup"), "reverify_speedup": rv.get("speedup"),
            "agree": rv.get("agree"), "accepted_speedup": r.get("speedup"), "flags": r.get("flags"),
            "other_gpu": bool(rv.get("gpu_uuid")) and rv.get("gpu_uuid") != rv.get("first_gpu_uuid")}


def warm_cache(cands, cfg: EvalConfig, device: str, workers: int = 4):
    todo = [(t, s) for t, s in cands if any(m in s.source for m in BUILD_MARKERS)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outs = list(pool.map(lambda ts: precompile(ts[1].source, cfg, device), todo))
    return {"candidates_with_builds": len(todo), "ok": sum(1 for o in outs if o.get("ok")),
            "seconds": round(time.monotonic() - t0, 1),
            "errors": [o.get("error") for o in outs if not o.get("ok")][:5]}


def device_names(devices: list[str]) -> list[str]:
    if devices[0] == "cpu":
        return [platform.processor() or platform.machine()] * len(devices)
    import torch

    return [torch.cuda.get_device_name(int(d.split(":")[1])) for d in devices]


def markdown(report: dict) -> str:
    lines = [f"# Evaluation service benchmark ({report['date']}, {report['host']})", "",
             f"Devices: {', '.join(f'{d} ({n})' for d, n in zip(report['devices'], report['device_names']))}  ",
             f"Command: `{report['command']}`  ",
             f"Batch: {report['n_candidates']} seed candidates over {report['n_tasks']} tasks; budget "
             f"{report['settings']['budget_s']} s, {report['settings']['correctness_trials']} correctness trials; "
             f"compile cache {'warm' if report['warm'] else 'cold'}", ""]
    if report.get("warmup"):
        w = report["warmup"]
        lines += [f"Compile-cache warm-up: {w['ok']}/{w['candidates_with_builds']} candidates with builds in "
                  f"{w['seconds']} s", ""]
    lines += ["| phase | workers | jobs finished | span s | wall s | jobs/hour | successes | jobs per worker |",
              "|---|---|---|---|---|---|---|---|"]
    for p in report["phases"]:
        done = f"{p['finished']}/{p['jobs']}" + (" (cut at the time limit)" if p["partial"] else "")
        lines.append(f"| {p['phase']} | {p['workers']} | {done} | {p['span_s']} | {p['wall_s']} | "
                     f"{p['jobs_per_hour']} | {p['success']} | "
                     f"{', '.join(str(v) for v in p['per_worker_jobs'].values())} |")
    if report.get("scaling") is not None:
        target = report.get("scaling_target", 1.8)
        how = (" (both phases at once, on disjoint GPUs)" if report["settings"].get("concurrent") else
               " (the two phases in separate runs of the same batch, joined by --combine)"
               if report["settings"].get("separate_runs") else "")
        lines += ["", f"**Scaling: {report['scaling']}x** with {report['phases'][-1]['workers']} workers against 1"
                  f"{how} (target >= {target}x: 0.9x per worker): "
                  f"{'met' if report['scaling'] >= target else 'NOT met'}"]
        sj = report.get("same_jobs")
        if sj and any(p["partial"] for p in report["phases"]):
            lines.append(f"- a phase was cut short, so the rates come from different job mixes; on the {sj['jobs']} "
                         f"jobs both finished: {sj['single_mean_s']} s per job alone, {sj['multi_mean_s']} s beside "
                         f"the other workers: {sj['scaling_same_jobs']}x with every worker busy")
    for p in report["phases"]:
        rv = p.get("reverified") or []
        if rv:
            lines.append(f"- {p['phase']}: {len(rv)} results re-measured, {p['reverified_on_other_gpu']} of them on "
                         f"another GPU than the first measurement's; agreed {sum(1 for t in rv if t['agree'])}")
    rv = report.get("reverify") or {}
    lines += ["", "## Forced re-verification", ""]
    if rv.get("ran"):
        lines += [f"- candidate: {rv['task']} / {rv['seed']}",
                  f"- first measurement: {rv['first_worker']} (GPU {rv['first_gpu_uuid']}): {rv['first_speedup']}x",
                  f"- re-measured by: {rv['reverify_worker']} on {rv['reverify_device']} (GPU "
                  f"{rv['reverify_gpu_uuid']}): {rv['reverify_speedup']}x, mode {rv['mode']}",
                  f"- on the other GPU: {'yes' if rv['other_gpu'] else 'NO'}; agree: {rv['agree']}; accepted "
                  f"speedup {rv['accepted_speedup']}x; flags {rv['flags']}"]
    else:
        lines.append(f"- not run: {rv.get('why')}")
    return "\n".join(lines)


class _Done(Exception):
    """--only-single: the run ends after its one phase."""


def add_scaling(report: dict) -> None:
    """The scaling keys from a report's [single, multi] phases (the issue's target: >= 0.9x per GPU added)."""
    p1, pn = report["phases"]
    if p1["jobs_per_hour"] and pn["jobs_per_hour"]:
        report["scaling"] = round(pn["jobs_per_hour"] / p1["jobs_per_hour"], 3)
        report["scaling_per_worker"] = round(report["scaling"] / pn["workers"], 3)
        report["scaling_target"] = round(0.9 * pn["workers"], 2)
        report.update(same_jobs(p1, pn))


def join_parts(reports: list[dict], batch: list[str]) -> tuple[dict | None, str | None]:
    """One single phase from --only-single --part K/N runs of one batch (each part every N-th candidate from the
    K-th): jobs and finished summed, the spans added (the parts ran one after another on one worker, so the rate is
    all finished jobs over all busy time), each job's service seconds back in batch order. (None, why) when the parts
    are not exactly 1..N of this batch."""
    parts = sorted((((r.get("part") or [1, 1]), r) for r in reports), key=lambda kr: kr[0])
    n = parts[0][0][1]
    if [k for (k, _), _ in parts] != list(range(1, n + 1)) or any(pn != n for (_, pn), _ in parts):
        return None, f"the single parts are {[k for k, _ in parts]}, not 1..{n} of {n}"
    if any((r.get("batch") or r["candidates"]) != batch for _, r in parts):
        return None, "the batches differ"
    phases = [next((p for p in r["phases"] if p["phase"] == "single"), None) for _, r in parts]
    if None in phases:
        return None, "a report has no single phase"
    if n == 1:
        return phases[0], None
    service: list = [None] * len(batch)
    for (k, _), ph in zip((kn for kn, _ in parts), phases):
        for j, v in enumerate(ph.get("service_s") or []):
            service[(k - 1) + j * n] = v
    per_worker: dict[str, int] = {}
    for ph in phases:
        for w, c in (ph.get("per_worker_jobs") or {}).items():
            per_worker[w] = per_worker.get(w, 0) + c
    finished, span = sum(ph["finished"] for ph in phases), sum(ph["span_s"] for ph in phases)
    joined = dict(phases[0], jobs=sum(ph["jobs"] for ph in phases), finished=finished, service_s=service,
                  reverified=[t for ph in phases for t in ph.get("reverified") or []],
                  reverified_on_other_gpu=sum(ph.get("reverified_on_other_gpu") or 0 for ph in phases),
                  partial=any(ph.get("partial") for ph in phases), wall_s=round(sum(ph["wall_s"] for ph in phases), 2),
                  span_s=round(span, 2), jobs_per_hour=round(finished / span * 3600, 1) if span > 0 else None,
                  per_worker_jobs=per_worker, parts=n,
                  success=sum(ph.get("success") or 0 for ph in phases),
                  failed_jobs=sum(ph.get("failed_jobs") or 0 for ph in phases))
    return joined, None


def combine(*files: str, out: str | None) -> int:
    """One report from separate runs of the same batch: the single phase of the first (or of several
    --only-single --part K/N runs, joined: a 1-GPU phase too long for one device call), the multi phase (and the
    forced re-verification) of the last. Refused (exit 2) when the batches or the evaluation settings differ."""
    *singles, multi_json = files
    reports = [json.loads(Path(f).read_text()) for f in files]
    *sa, b = reports
    a = sa[0]
    pb = [p for p in b["phases"] if p["phase"] == "multi"]
    keys = ("budget_s", "correctness_trials", "reverify", "reverify_above", "max_extension_seeds")
    why = ("no single report" if not singles else "the last report has no multi phase" if not pb else None)
    joined = None
    if why is None:
        joined, why = join_parts(sa, b["candidates"])
    if why is None and any(r["settings"].get(k) != b["settings"].get(k) for r in sa for k in keys):
        why = "the settings differ"
    if why:
        print(f"--combine refused: {why}", file=sys.stderr)
        return 2
    pa = [joined]
    report = dict(b, phases=[pa[0], pb[0]], date=a["date"], devices=[*a["devices"][:1], *b["devices"]],
                  device_names=[*a["device_names"][:1], *b["device_names"]],
                  command="  +  ".join(r["command"] for r in reports) + "  (joined by --combine)",
                  settings=dict(b["settings"], separate_runs=True, concurrent=False),
                  runs=[{k: r.get(k) for k in ("date", "host", "command", "devices", "warmup", "part")}
                        for r in reports])
    report.pop("scaling", None)
    report.pop("same_jobs", None)
    add_scaling(report)
    report["markdown"] = markdown(report)
    print(report["markdown"])
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(report, indent=2, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="0,1", help="Comma list of CUDA indices, or 'cpu' (with --cpu-workers).")
    ap.add_argument("--cpu-workers", type=int, default=2, help="With --gpus cpu: workers in the multi phase.")
    ap.add_argument("--n", type=int, default=48, help="Seed candidates in the batch (>= 40 for the target).")
    ap.add_argument("--expect", default="faster,slower,wrong", help="Which seeds (their header's expect).")
    ap.add_argument("--budget-s", type=float, default=1.0, help="Paired timing budget per candidate.")
    ap.add_argument("--correctness-trials", type=int, default=10, help="Correctness input sets per candidate.")
    ap.add_argument("--store", default=None, help="Store URL for both phases (default: a fresh SQLite file each).")
    ap.add_argument("--work-dir", default=None, help="Stores, worker logs, compile cache (default: a temp dir).")
    ap.add_argument("--cold", action="store_true", help="Do not warm the compile cache (phase 1 builds first).")
    ap.add_argument("--reverify-wait-s", type=float, default=600.0,
                    help="How long a re-verification is kept off the measuring worker's GPU.")
    ap.add_argument("--skip-single", action="store_true", help="Only the N-worker phase (no scaling figure).")
    ap.add_argument("--only-single", action="store_true",
                    help="Only the 1-worker phase, on the first GPU, with the whole time limit: on a machine whose "
                    "other GPUs are busy (a pipeline run), the slow phase can take its 10+ minutes there; a later "
                    "--skip-single run times the same batch on N GPUs and --combine joins the two.")
    ap.add_argument("--part", default=None, metavar="K/N",
                    help="With --only-single: time only every N-th candidate of the batch from the K-th (one "
                    "worker needs ~13 min for 102 jobs, a device call allows 10): --combine joins the N parts.")
    ap.add_argument("--combine", nargs="+", metavar="JSON", default=None,
                    help="SINGLE_JSON [SINGLE_JSON ...] MULTI_JSON: join --only-single report(s) (one, or the "
                    "--part K/N runs 1..N) and a --skip-single report of the same batch into one with the scaling "
                    "(refused when their batches or settings differ); writes --out.")
    ap.add_argument("--reverify", action="store_true",
                    help="Re-measure speedups above reverify_above as a training run does (issue 30's fleet run): in "
                    "the single phase its one worker re-measures in fresh processes at once, in the multi phase "
                    "another GPU does (--reverify-wait-s); each phase lists which GPU measured each twice. Off: "
                    "only the batch is timed.")
    ap.add_argument("--reverify-above", type=float, default=None,
                    help="With --reverify: re-measure speedups above this (default: EvalConfig's reverify_above). "
                    "Lower it where the batch has few large speedups (a CPU smoke) so the lists are not empty.")
    ap.add_argument("--max-extension-seeds", type=int, default=None,
                    help="At most this many seeds with a load_inline/Triton build in the batch (each is an nvcc "
                    "build in the warm-up; default: all of them).")
    ap.add_argument("--concurrent", action="store_true",
                    help="Run the single phase on the first GPU and the multi phase on the others at the same "
                    "time (each its own store and workers): one call times both on the same host conditions, in "
                    "half the wall time. Scaling is then (N-1) workers against 1.")
    ap.add_argument("--max-minutes", type=float, default=9.0,
                    help="Whole run, warm-up included (a device call allows 10): a phase cut short reports the "
                    "throughput of the jobs that finished, marked partial. Split: 60%% single, the rest multi.")
    ap.add_argument("--out", default=None, help="Write the JSON report here.")
    a = ap.parse_args(argv)
    if a.combine:
        if len(a.combine) < 2:
            ap.error("--combine needs at least a single report and a multi report")
        return combine(*a.combine, out=a.out)
    part = None
    if a.part:
        try:
            part = [int(x) for x in a.part.split("/")]
            assert len(part) == 2 and 1 <= part[0] <= part[1]
        except (ValueError, AssertionError):
            ap.error(f"--part {a.part!r}: expected K/N with 1 <= K <= N, e.g. 1/2")
        if not a.only_single:
            ap.error("--part is for --only-single runs (the multi phase times the whole batch in one call)")

    cpu = a.gpus == "cpu"
    devices = ["cpu"] * a.cpu_workers if cpu else [f"cuda:{int(g)}" for g in a.gpus.split(",")]
    work = Path(a.work_dir or tempfile.mkdtemp(prefix="kernelrl-service-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)  # the candidates' unprivileged uids reach the compile cache below it
    cache = work / "compile-cache"
    cache.mkdir(exist_ok=True)
    cache.chmod(0o755)
    if not cpu:
        pin_cuda_arch(devices[0])  # workers inherit it: warm-up and timed builds use the same nvcc flags
    cfg = EvalConfig(device=devices[0], budget_s=a.budget_s, correctness_trials=a.correctness_trials,
                     reverify=a.reverify, cache_dir=str(cache),
                     **({"reverify_above": a.reverify_above} if a.reverify_above is not None else {}))
    cands = pick_candidates(a.n, not cpu, set(a.expect.split(",")), a.max_extension_seeds)
    batch = [f"{t.key}/{s.name}" for t, s in cands]
    if part:  # every N-th from the K-th: round-robin picking puts every task in each part
        cands = cands[part[0] - 1::part[1]]
    if a.concurrent and len(devices) < 2:
        ap.error("--concurrent needs at least two devices (one for the single phase, the rest for multi)")
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "host": socket.gethostname(),
              "command": " ".join([Path(sys.argv[0]).name if argv is None else "service_bench.py",
                                   *(argv or sys.argv[1:])]),
              "devices": devices, "device_names": device_names(devices), "n_candidates": len(cands),
              "n_tasks": len({t.key for t, _ in cands}), "warm": not a.cold,
              "settings": {"budget_s": a.budget_s, "correctness_trials": a.correctness_trials,
                           "reverify": a.reverify, "reverify_above": cfg.reverify_above,
                           "concurrent": a.concurrent, "max_extension_seeds": a.max_extension_seeds},
              "candidates": [f"{t.key}/{s.name}" for t, s in cands], "phases": [], "work_dir": str(work),
              **({"part": part, "batch": batch} if part else {})}
    rc = 0
    t_start = time.monotonic()
    left = lambda: a.max_minutes * 60 - (time.monotonic() - t_start)  # noqa: E731
    if not a.cold:
        report["warmup"] = warm_cache(cands, cfg, devices[0])
        print(f"warm-up: {report['warmup']}", file=sys.stderr)
    multi = single = None
    reserve = 90.0  # the forced re-verification (two evaluations) and shutting workers down
    try:
        # one worker: its re-measurements run at once in fresh processes (waiting for another GPU is pointless)
        single_wait = 0.0 if a.reverify else a.reverify_wait_s
        if a.concurrent:  # both phases at once on disjoint GPUs, each with its own store and workers
            with ThreadPoolExecutor(max_workers=2) as pool:
                f1 = pool.submit(run_phase, "single", devices[:1], cands, cfg, work, None, left() - reserve,
                                 single_wait)
                fn = pool.submit(run_phase, "multi", devices[1:], cands, cfg, work, None, left() - reserve,
                                 a.reverify_wait_s, True)
                (p1, single), (pn, multi) = f1.result(), fn.result()
            report["phases"] += [p1, pn]
            print(f"phase single: {p1}\nphase multi: {pn}", file=sys.stderr)
        else:
            if not a.skip_single:
                share = 1.0 if a.only_single else 0.6
                # --only-single keeps a short reserve too: cancelling, the last results and stopping the worker
                # come after the phase's cut, inside --max-minutes (a call's timeout set from it then holds)
                p1, single = run_phase("single", devices[:1], cands, cfg, work, a.store,
                                       (left() - (30.0 if a.only_single else reserve)) * share, single_wait)
                report["phases"].append(p1)
                print(f"phase single: {p1}", file=sys.stderr)
            if a.only_single:
                report["reverify"] = {"ran": False, "why": "--only-single: no second GPU in this run"}
                raise _Done
            pn, multi = run_phase("multi", devices, cands, cfg, work, a.store, left() - reserve,
                                  a.reverify_wait_s, keep_up=True)
            report["phases"].append(pn)
            print(f"phase multi: {pn}", file=sys.stderr)
        if len(report["phases"]) == 2:
            add_scaling(report)
        report["reverify"] = reverify_demo(multi, cands, cfg, max(30.0, left() - 15),
                                           earlier=single["results"] if single else None)
    except _Done:
        pass
    except TimeoutError as e:
        report["error"] = str(e)
        rc = 1
    finally:
        if multi is not None:
            stop_workers(multi["procs"])
    md = markdown(report) if report["phases"] else f"no phase finished: {report.get('error')}"
    print(md)
    report["markdown"] = md
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(report, indent=2, default=str))
    return rc


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
