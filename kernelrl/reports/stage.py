"""The bench stage's body (``python -m steps.bench``; the step's docstring says what it does): the run's best
kernels re-scored with the final-evaluation protocol and the report written."""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("kernelrl.steps.bench")


def metrics_of(report) -> dict:
    groups = report.sources[0].summaries()
    s = groups["all"]
    m = {"tasks": s.n, "success": s.success, "faster": s.faster, "mean_speedup": round(s.mean, 4),
         "median_speedup": round(s.p50, 4), "max_speedup": round(s.max, 4), "p75": round(s.p75, 4),
         "p25": round(s.p25, 4), "geomean_successful": round(s.geomean, 4) if s.geomean else None,
         "custom_kernel_share": round(s.custom_share, 4) if s.custom_share is not None else None}
    for g, sl in groups.items():
        if g != "all":
            m[f"{g}_mean_speedup"] = round(sl.mean, 4)
            m[f"{g}_success"] = sl.success
            m[f"{g}_faster"] = sl.faster
    return m


def run_bench_stage(ctx) -> dict:
    from kernelrl.reports.runner import BenchOptions, load_tasks, run_bench

    r = ctx.recipe
    tasks = load_tasks(r.suite, r.bench.levels, r.task_limit)
    out = ctx.work_dir / "report"
    upstream_status = {st: (ctx.store.stage_record(ctx.run, st) or {}).get("status")
                       for st in ("augment", "sft", "selfsup", "crl")}
    if ctx.dry_run:
        return {"outputs": {"report_dir": str(out)}, "metrics": {"tasks": len(tasks), "dry_run": True},
                "upstream_status": upstream_status}
    opts = BenchOptions(suite=r.suite, levels=r.bench.levels, task_limit=r.task_limit, sources=[f"run:{ctx.run}"],
                        labels=[f"run {ctx.run}"], out=out, budget_s=r.bench.budget_s,
                        correctness_trials=r.bench.correctness_trials, plots=r.bench.plots, eval_base=r.eval,
                        title=f"kernelrl run {ctx.run} (recipe {r.name}): final evaluation",
                        command=" ".join(["python -m steps.bench", *sys.argv[1:]]), artifacts=True,
                        resume=True)  # a re-run (after a kill) keeps the final scores it already stored
    # the run's record exists (run_step registered this stage), so a run without candidates scores all zeros
    report, paths = run_bench(opts, ctx.store)
    report_uri = None
    try:
        from kernelrl.checkpoints import open_checkpoint_store

        ck = open_checkpoint_store(ctx.settings)
        ck.put_dir(out, f"runs/{ctx.run}/bench-report")
        report_uri = ck.uri(f"runs/{ctx.run}/bench-report")
    except Exception as e:  # the local report is the output; the copy is a convenience for containers
        log.warning("report not copied to the checkpoint store: %s", e)
    outputs = {"report": str(paths["markdown"]), "report_json": str(paths["json"]), "report_csv": str(paths["csv"]),
               "report_dir": str(out), "report_uri": report_uri}
    return {"outputs": outputs, "metrics": metrics_of(report), "upstream_status": upstream_status}
