"""The bench stage's body (``python -m steps.bench``; the step's docstring says what it does): what the trained
model can do, then the best kernels the run found, each re-scored with the final-evaluation protocol.

Rows of the report, in order, each labelled:

1. **trained policy**: fresh samples of the last trained stage's final checkpoint (``bench.policy_stage``,
   ``bench.policy_samples_per_task``, ``bench.policy_prompt``; ``kernelrl.reports.policy``), every sample a row;
2. **best kernel the run's policies generated**: per task, the best candidate that the run's sft/selfsup/crl
   policies produced during training (their training samples and end-of-stage evaluations; teachers excluded);
3. **teachers' best**: per task, the best candidate the run's augment stage produced (teachers or the seed
   corpus), i.e. the SFT data.

The manifest's metrics name which is which: ``policy_*``, ``run_best_*``, ``teachers_best_*``.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("kernelrl.steps.bench")

# Stages whose candidates are the run's own policies' output (links in candidate_runs): training samples and the
# end-of-stage evaluations. Not augment (teachers), not bench-policy (this stage's own samples).
POLICY_STAGES = ("sft-eval", "selfsup", "selfsup-eval", "crl", "crl-eval")
RUN_BEST_LABEL = "best kernel the run's policies generated (training samples; teachers excluded)"
TEACHERS_LABEL = "teachers' best (augment: the SFT data)"


def summary_metrics(source) -> dict:
    """The numbers of one report row: per-task statistics, or per-sample for a policy row (unit kernel)."""
    groups = source.summaries()
    s = groups["all"]
    m = {"label": source.label, "n": s.n, "success": s.success, "faster": s.faster,
         "success_rate": round(s.success / s.n, 4) if s.n else 0.0, "mean_speedup": round(s.mean, 4),
         "median_speedup": round(s.p50, 4), "max_speedup": round(s.max, 4), "p75": round(s.p75, 4),
         "p25": round(s.p25, 4), "geomean_successful": round(s.geomean, 4) if s.geomean else None,
         "custom_kernel_share": round(s.custom_share, 4) if s.custom_share is not None else None}
    for g, sl in groups.items():
        if g != "all":
            m[f"{g}_mean_speedup"] = round(sl.mean, 4)
            m[f"{g}_success"] = sl.success
            m[f"{g}_faster"] = sl.faster
    if source.provenance:
        m["provenance"] = {k: v for k, v in source.provenance.items() if k != "exemplar_ids"}
    return m


def metrics_of(report, n_policy: int, n_tasks: int) -> dict:
    """``policy`` (first policy row; ``policy_rows`` all of them), ``run_best``, ``teachers_best``, and flat
    headline keys named after their row, so a summary line cannot pass one row's number off as another's."""
    rows = [summary_metrics(s) for s in report.sources]
    policy, run_best, teachers = rows[:n_policy], rows[n_policy], rows[n_policy + 1]
    m = {"tasks": n_tasks, "run_best": run_best, "teachers_best": teachers,
         "run_best_success": run_best["success"], "run_best_mean_speedup": run_best["mean_speedup"],
         "run_best_median_speedup": run_best["median_speedup"],
         "teachers_best_success": teachers["success"], "teachers_best_mean_speedup": teachers["mean_speedup"]}
    if policy:
        m.update(policy=policy[0], policy_rows=policy, policy_samples=policy[0]["n"],
                 policy_success_rate=policy[0]["success_rate"], policy_mean_speedup=policy[0]["mean_speedup"],
                 policy_median_speedup=policy[0]["median_speedup"])
    return m


def policy_spec(ctx) -> tuple[str | None, str]:
    """(the policy source spec, or None with the reason the row is left out)."""
    from kernelrl.reports.policy import last_trained_stage

    b = ctx.recipe.bench
    if b.policy_stage == "none" or b.policy_samples_per_task <= 0:
        return None, "bench.policy_stage is none (or no samples per task): no trained-policy row"
    from kernelrl.errors import KernelRLError
    from kernelrl.reports.policy import checkpoint_dir

    stage = last_trained_stage(ctx.store, ctx.run) if b.policy_stage == "auto" else b.policy_stage
    record = ctx.store.stage_record(ctx.run, stage) if stage else None
    if not stage or (record or {}).get("status") != "done":
        return None, f"run {ctx.run} has no finished {b.policy_stage if stage is None else stage} stage to sample"
    try:  # a checkpoint this machine cannot load costs the row, not the report (the reason is in both)
        checkpoint_dir(record, ctx.run, stage, ctx.settings)
    except KernelRLError as e:
        return None, f"trained-policy row left out: {e}"
    return f"policy:{ctx.run}/{stage}@{b.policy_prompt}", ""


def policy_pool_pin(ctx, spec: str) -> int | None:
    """The exemplar pool the trained-policy row's prompts are built from, as an evaluation id that a resumed bench
    reuses: None where the sampled stage recorded its own snapshot (crl; a stage evaluated in the contrastive
    format), else the pool as this bench found it on its first attempt, kept in the bench stage's ``inputs`` until
    the stage is done (run_step clears them in that write). Why: "the pool as it is now" on a re-run after a kill
    included the final evaluations the killed attempt had stored, so its prompts, samples and attempts differed
    from the first's (slow suite, test_bench_killed_while_evaluating_resumes: 4 bench-policy attempts where an
    unkilled run makes 3)."""
    from kernelrl.reports.policy import parse_policy_spec, stage_snapshot
    from kernelrl.training.crl import store_snapshot

    _run, stage, _fmt = parse_policy_spec(spec)
    if stage_snapshot(ctx.store.stage_record(ctx.run, stage) or {}) is not None:
        return None
    pin = ((ctx.store.stage_record(ctx.run, "bench") or {}).get("inputs") or {}).get("policy_pool_as_of")
    if pin is None:
        pin = store_snapshot(ctx.store)
        ctx.store.set_stage_inputs(ctx.run, "bench", {"policy_pool_as_of": pin})
    return int(pin)


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
    spec, skipped = policy_spec(ctx)
    sources = [f"{ctx.run}/{'+'.join(POLICY_STAGES)}", f"{ctx.run}/augment"]
    labels = [RUN_BEST_LABEL, TEACHERS_LABEL]
    if spec:  # first; its label (empty: the default) names the run, stage and prompt format
        sources, labels = [spec, *sources], ["", *labels]
    opts = BenchOptions(suite=r.suite, levels=r.bench.levels, task_limit=r.task_limit, sources=sources,
                        labels=labels, out=out, budget_s=r.bench.budget_s,
                        correctness_trials=r.bench.correctness_trials, plots=r.bench.plots, eval_base=r.eval,
                        title=f"kernelrl run {ctx.run} (recipe {r.name}): final evaluation",
                        command=" ".join(["python -m steps.bench", *sys.argv[1:]]), artifacts=True,
                        resume=True,  # a re-run (after a kill) keeps the final scores it already stored
                        reuse_scores=r.bench.reuse_scores,  # false when the pipeline forces bench: measure again
                        recipe=r)
    if spec:
        opts.policy_as_of = policy_pool_pin(ctx, spec)
    # the run's record exists (run_step registered this stage), so a run without candidates scores all zeros
    report, paths = run_bench(opts, ctx.store)
    if skipped:
        report.notes.append(skipped)
        paths = report.write(out, plots=r.bench.plots)
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
    metrics = metrics_of(report, len(report.sources) - 2, len(tasks))
    if skipped:
        metrics["policy_skipped"] = skipped
    return {"outputs": outputs, "metrics": metrics, "upstream_status": upstream_status}
