"""One Prefect task per pipeline stage, with skip logic, retries and UI artifacts; a flow per stage.

    from flows.stages import sft_flow
    sft_flow(run="smoke", recipe="smoke")                 # one stage, as a flow (a deployment per stage)

Skip logic (ours, against the store's stage records; more robust than Prefect's result cache, whose default
policy includes the flow-run id): a stage's cache key is

    sha256(stage-scoped recipe digest, STAGE_VERSIONS[stage], digests of the upstream stages' manifests)

and a stage whose record is ``done`` with that key, and whose outputs (local paths, ``s3://`` URIs in its
manifest) still exist, is not re-run. The stage-scoped recipe is the recipe without the *other* stages'
sections (and without name/description/gpus, which do not change what a stage produces): ``--set
bench.budget_s=5`` re-runs bench only, ``--set model.dtype=...`` re-runs everything. A step that reads another
stage's section must say so in ``STAGE_SECTIONS``. Upstream manifests include their wall time, so a re-run
upstream stage always invalidates the stages after it. A manifest's ``outputs`` should name only what persists
(checkpoints, reports): a listed path that is gone makes the stage run again.

Retries: each stage task retries ``retries`` times with exponential backoff from ``retry_delay_s``, only for
retryable failures (``StepFailed.retryable``: a crash, a signal, a timeout; not exit 2). A stage killed mid-run
is simply run again: resuming from its own checkpoint is the step's job.

Prefect's own result cache is off (``NO_CACHE``): a flow-run retry (``prefect flow-run retry``) re-enters every
task and the store-based skip decides.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.runner import CONSOLE, StepFailed, make_runner
from flows.secrets import apply_prefect_secrets
from kernelrl.errors import ConfigError
from kernelrl.step import DEFAULT_RECIPE, STAGE_VERSIONS, STAGES, load_overrides

# Recipe sections that belong to one stage; everything else in a recipe is common to all stages.
STAGE_SECTIONS: dict[str, tuple[str, ...]] = {s: (s,) for s in STAGES}
# Recipe fields that do not change any stage's output (labels, GPU placement).
IGNORED_FIELDS = ("name", "description", "gpus")
DEFAULT_RETRIES = 2  # a crash or a lost node is retried twice before the stage (and the pipeline) fails
DEFAULT_RETRY_DELAY_S = 30.0  # first retry after 30 s, then 60 s, 120 s... (a flaky store or S3 gets time)


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def stage_recipe_view(recipe_dict: dict[str, Any], stage: str) -> dict[str, Any]:
    """The part of a recipe that determines ``stage``'s output."""
    other = {sec for s, secs in STAGE_SECTIONS.items() if s != stage for sec in secs} - set(STAGE_SECTIONS[stage])
    return {k: v for k, v in recipe_dict.items() if k not in other and k not in IGNORED_FIELDS}


def manifest_digest(manifest: dict[str, Any]) -> str:
    return _sha(manifest)


def stage_cache_key(recipe_dict: dict[str, Any], stage: str, upstream: dict[str, dict[str, Any]]) -> str:
    """The skip key of a stage: its recipe view, code version and the manifests it builds on."""
    return _sha({
        "recipe": _sha(stage_recipe_view(recipe_dict, stage)),
        "stage": stage,
        "version": STAGE_VERSIONS.get(stage),
        "upstream": {s: manifest_digest(m) for s, m in sorted(upstream.items())},
    })[:32]


def upstream_stages(stage: str) -> tuple[str, ...]:
    return STAGES[:STAGES.index(stage)]


def _uris(value: Any):
    if isinstance(value, str):
        if value.startswith(("/", "file://", "s3://")):
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _uris(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _uris(v)


def missing_outputs(manifest: dict[str, Any], settings) -> list[str]:
    """Outputs of a manifest (local paths, s3:// URIs) that no longer exist; [] when all are there."""
    missing = []
    for uri in _uris(manifest.get("outputs") or {}):
        if uri.startswith("s3://"):
            if not _s3_exists(uri, settings):
                missing.append(uri)
        elif not Path(uri.removeprefix("file://")).exists():
            missing.append(uri)
    return missing


def _s3_exists(uri: str, settings) -> bool:
    from kernelrl.checkpoints import open_checkpoint_store

    bucket, _, key = uri[len("s3://"):].partition("/")
    try:
        store = open_checkpoint_store(f"s3://{bucket}", settings)
        resp = store.client.list_objects_v2(Bucket=bucket, Prefix=key.rstrip("/"), MaxKeys=1)
        return resp.get("KeyCount", 0) > 0
    except Exception:  # unreachable S3: cannot prove the output exists, so the stage runs (and reports why)
        return False


# -- artifacts -------------------------------------------------------------------------------------------------
def artifact_key(*parts: str) -> str:
    """Prefect artifact keys: lowercase letters, digits and dashes only."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", "-".join(parts).lower())).strip("-")[:200]


def _quantiles(values: list[float]) -> dict[str, float]:
    xs = sorted(float(v) for v in values)
    if not xs:
        return {}

    def q(p: float) -> float:
        i = (len(xs) - 1) * p
        lo, hi = math.floor(i), math.ceil(i)
        return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)

    return {"p10": q(0.1), "p50": q(0.5), "p90": q(0.9), "mean": sum(xs) / len(xs), "n": len(xs)}


def metric_rows(metrics: dict[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """Flatten manifest metrics into table rows; numeric lists become quantiles (speedups -> p10/p50/p90)."""
    rows: list[dict[str, Any]] = []
    for k, v in (metrics or {}).items():
        name = f"{prefix}{k}"
        if isinstance(v, bool) or isinstance(v, (int, float)):
            rows.append({"metric": name, "value": round(float(v), 4) if isinstance(v, float) else v})
        elif isinstance(v, dict):
            rows.extend(metric_rows(v, name + "."))
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) for x in v):
            for qk, qv in _quantiles(list(v)).items():
                rows.append({"metric": f"{name}.{qk}", "value": round(qv, 4) if isinstance(qv, float) else qv})
        elif isinstance(v, str):
            rows.append({"metric": name, "value": v})
    return rows


def stage_markdown(stage: str, run_name: str, result: dict[str, Any]) -> str:
    m = result.get("manifest") or {}
    lines = [f"# {run_name} / {stage}: {result['status']}", "",
             f"- cache key `{result.get('cache_key')}`, wall {m.get('wall_s', '?')} s, recipe `{m.get('recipe')}`"]
    outs = m.get("outputs") or {}
    if outs:
        lines += ["", "## Outputs", ""] + [f"- **{k}**: `{v}`" for k, v in outs.items()]
    rows = metric_rows(m.get("metrics") or {})
    if rows:
        lines += ["", "## Metrics", "", "| metric | value |", "|---|---|"]
        lines += [f"| {r['metric']} | {r['value']} |" for r in rows]
    return "\n".join(lines) + "\n"


def publish_stage_artifacts(stage: str, run_name: str, result: dict[str, Any], logger) -> None:
    """A markdown summary, a metrics table and links to checkpoints for the Prefect UI (never fails a stage)."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

    try:
        m = result.get("manifest") or {}
        create_markdown_artifact(stage_markdown(stage, run_name, result), key=artifact_key(run_name, stage),
                                 description=f"{stage} of run {run_name}")
        rows = metric_rows(m.get("metrics") or {})
        if rows:
            create_table_artifact(rows, key=artifact_key(run_name, stage, "metrics"),
                                  description=f"{stage} metrics (success rate, speedup quantiles)")
        for name, uri in (m.get("outputs") or {}).items():
            if isinstance(uri, str) and uri.startswith(("/", "s3://", "file://")):
                link = uri if "://" in uri else f"file://{uri}"
                create_link_artifact(link, link_text=f"{stage} {name}: {uri}",
                                     key=artifact_key(run_name, stage, name), description=f"{stage} output {name}")
        report_dir = (m.get("outputs") or {}).get("report_dir")
        if stage == "bench" and isinstance(report_dir, str) and (Path(report_dir) / "report.json").exists():
            from kernelrl.reports.artifacts import publish_report_dir

            # the full benchmark report (markdown, summary and per-task tables) written by steps.bench
            publish_report_dir(report_dir, key=artifact_key(run_name, "report"))
    except Exception as e:
        logger.warning("%s: could not publish artifacts: %s", stage, e)


class _Progress:
    """Feeds ``KERNELRL_PROGRESS`` lines into one Prefect progress artifact (throttled)."""

    def __init__(self, stage: str, run_name: str, logger, min_interval_s: float = 2.0):
        self.stage, self.run_name, self.logger = stage, run_name, logger
        self.min_interval_s = min_interval_s
        self.artifact_id = None
        self.last = 0.0
        self.last_value = -1.0

    def __call__(self, fraction: float, message: str = "") -> None:
        from prefect.artifacts import create_progress_artifact, update_progress_artifact

        now = time.monotonic()
        pct = round(fraction * 100.0, 1)
        if self.artifact_id is None:
            self.artifact_id = create_progress_artifact(pct, key=artifact_key(self.run_name, self.stage, "progress"),
                                                        description=f"{self.stage}: {message}".strip(": "))
        elif pct == 100.0 or (now - self.last >= self.min_interval_s and pct != self.last_value):
            update_progress_artifact(self.artifact_id, pct, description=f"{self.stage}: {message}".strip(": "))
        else:
            return
        self.last, self.last_value = now, pct


# -- the task ------------------------------------------------------------------------------------------------
def _retry_if_retryable(task, task_run, state) -> bool:
    """Prefect retry condition: retry a StepFailed only when it is retryable; other exceptions retry."""
    exc = state.data if isinstance(state.data, BaseException) else None
    if exc is None:
        try:
            exc = state.result(raise_on_failure=False)
        except Exception as e:  # noqa: BLE001 - the result itself may be the failure
            exc = e
    if isinstance(exc, StepFailed):
        return exc.retryable
    return not isinstance(exc, ConfigError)


def _logger():
    from flows.runner import stage_logger

    return stage_logger("flow")


def execute_stage(stage: str, run: str, recipe: str = DEFAULT_RECIPE, overrides: dict[str, Any] | None = None,
                  runner: str = "local", force: bool = False, module_prefix: str = "steps",
                  runner_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run (or skip) one stage; return ``{"stage", "status": done|skipped, "manifest", "cache_key"}``."""
    from kernelrl.config.recipes import load_recipe
    from kernelrl.config.settings import load_settings
    from kernelrl.store import Store

    logger = _logger()
    if stage not in STAGES:
        raise ConfigError(f"stage {stage!r}: expected one of {', '.join(STAGES)}")
    overrides = dict(overrides or {})
    apply_prefect_secrets()  # deployed flows: secrets from Prefect Secret blocks (flows/secrets.py)
    settings = load_settings()
    recipe_obj = load_recipe(recipe, load_overrides(overrides))
    store = Store(settings.resolved_store_url)
    try:
        store.upgrade()
        upstream = {}
        for up in upstream_stages(stage):
            rec = store.stage_record(run, up)
            if rec is None or rec["status"] != "done":
                raise StepFailed(stage, f"upstream stage {up!r} of run {run!r} has not finished; run it first "
                                 f"(kernelrl pipeline run --run {run} --from {up})", retryable=False)
            upstream[up] = rec["manifest"] or {}
        key = stage_cache_key(recipe_obj.to_dict(), stage, upstream)
        rec = store.stage_record(run, stage)
        if not force and rec and rec["status"] == "done" and rec["cache_key"] == key:
            missing = missing_outputs(rec["manifest"] or {}, settings)
            if not missing:
                logger.info("%s: skipped (done with the same inputs, cache key %s)", stage, key[:12])
                CONSOLE.info("%-8s skipped: done with the same inputs", stage)
                return {"stage": stage, "status": "skipped", "manifest": rec["manifest"], "cache_key": key}
            logger.info("%s: re-running: outputs missing: %s", stage, ", ".join(missing))
        elif force:
            logger.info("%s: forced re-run", stage)
        elif rec and rec["status"] == "done":
            logger.info("%s: re-running: inputs changed (cache key %s -> %s)", stage,
                        (rec["cache_key"] or "none")[:12], key[:12])
        manifest_out = Path(settings.home).resolve() / "runs" / run / "manifests" / f"{stage}.json"
        step_runner = make_runner(runner, module_prefix=module_prefix, **(runner_options or {}))
        progress = _Progress(stage, run, logger) if _in_run_context() else None
        log_file = stage_log_path(settings, run, stage)
        CONSOLE.info("%-8s started (log: %s)", stage, log_file)
        try:
            manifest = step_runner.run(stage, run, recipe, _step_overrides(stage, overrides, force), manifest_out,
                                       on_progress=progress, log_file=log_file)
        except StepFailed as e:
            CONSOLE.error("%-8s failed%s: %s", stage, " (will retry)" if e.retryable else "",
                          str(e).removeprefix(f"step {stage}: "))
            raise
        numbers = headline_metrics(manifest)
        CONSOLE.info("%-8s done in %s s%s", stage, manifest.get("wall_s", "?"), f": {numbers}" if numbers else "")
        # The step recorded done + manifest itself; the flow adds the key it will compare next time.
        store.set_stage(run, stage, status="done", recipe=recipe_obj.name, cache_key=key, manifest=manifest,
                        inputs={"recipe": recipe, "overrides": overrides, "upstream":
                                {s: manifest_digest(m) for s, m in upstream.items()}})
        return {"stage": stage, "status": "done", "manifest": manifest, "cache_key": key}
    finally:
        store.engine.dispose()


def _step_overrides(stage: str, overrides: dict[str, Any], force: bool) -> dict[str, Any]:
    """What the step runs with: a forced bench measures every kernel again instead of reusing its stored final
    scores (``bench.reuse_scores``; a kill-and-rerun keeps reusing them). Only the step sees it: the stage's cache
    key stays that of the recipe as given."""
    if force and stage == "bench" and "bench.reuse_scores" not in overrides:
        return {**overrides, "bench.reuse_scores": "false"}
    return overrides


def stage_log_path(settings, run: str, stage: str) -> Path:
    """Where a stage's whole output goes (every attempt appended): ``<home>/runs/<run>/logs/<stage>.log``."""
    return Path(settings.home).resolve() / "runs" / run / "logs" / f"{stage}.log"


# The few numbers of a stage's manifest worth a line on the console and a column in the summary table (crl's
# training numbers are under metrics.training). The policy stages' success_rate/mean_speedup are those of their
# end-of-stage policy evaluation.
HEADLINE_METRICS: dict[str, tuple[str, ...]] = {
    "augment": ("successes", "success_rate", "mean_speedup"),
    "sft": ("last_loss", "success_rate", "mean_speedup"),
    "selfsup": ("success_rate", "mean_speedup"),
    "crl": ("reward_mean_first", "reward_mean_last", "success_rate", "mean_speedup"),
    # which row each number is (kernelrl/reports/stage.py): the trained policy's samples, the best kernel the run's
    # policies generated during training, the teachers' best
    "bench": ("policy_success_rate", "policy_mean_speedup", "run_best_mean_speedup", "teachers_best_mean_speedup",
              "tasks"),
}


def headline_metrics(manifest: dict[str, Any] | None, limit: int = 5) -> str:
    """``last_loss=0.042 success_rate=0.5``: the stage's HEADLINE_METRICS that are plain numbers."""
    metrics = (manifest or {}).get("metrics") or {}
    pool = {**(metrics.get("training") or {}), **metrics} if isinstance(metrics.get("training"), dict) else metrics
    keys = HEADLINE_METRICS.get((manifest or {}).get("stage"), ("success_rate", "mean_speedup"))
    parts = []
    for k in keys:
        v = pool.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            parts.append(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}")
    return " ".join(parts[:limit])


def _in_run_context() -> bool:
    from prefect.context import FlowRunContext, TaskRunContext

    return bool(TaskRunContext.get() or FlowRunContext.get())


@task(name="stage", task_run_name="{stage}", cache_policy=NO_CACHE, retries=DEFAULT_RETRIES,
      retry_delay_seconds=DEFAULT_RETRY_DELAY_S, retry_condition_fn=_retry_if_retryable)
def stage_task(stage: str, run: str, recipe: str = DEFAULT_RECIPE, overrides: dict[str, Any] | None = None,
               runner: str = "local", force: bool = False, module_prefix: str = "steps",
               runner_options: dict[str, Any] | None = None) -> dict[str, Any]:
    result = execute_stage(stage, run, recipe, overrides, runner, force, module_prefix, runner_options)
    publish_stage_artifacts(stage, run, result, _logger())
    return result


def backoff(retries: int, delay_s: float) -> list[float]:
    """Exponential backoff: delay, 2*delay, 4*delay ... (capped at one hour)."""
    return [min(delay_s * (2 ** i), 3600.0) for i in range(max(retries, 0))] or [0.0]


def configured_stage_task(stage: str, retries: int | dict[str, int] = DEFAULT_RETRIES,
                          retry_delay_s: float = DEFAULT_RETRY_DELAY_S):
    """``stage_task`` with this stage's retry policy (``retries`` may be per stage: ``{"crl": 5}``)."""
    n = retries.get(stage, DEFAULT_RETRIES) if isinstance(retries, dict) else int(retries)
    return stage_task.with_options(retries=n, retry_delay_seconds=backoff(n, retry_delay_s))


STAGE_FLOW_DOCS = {
    "augment": "Stage 1a: teacher LLMs write kernels; successes go to the exemplar store.",
    "sft": "Stage 1b: supervised fine-tuning on the successful snippets.",
    "selfsup": "Stage 2: the self-supervised generate -> evaluate -> train loop.",
    "crl": "Stage 3: contrastive RL (GRPO with scored exemplars in the prompt).",
    "bench": "Final benchmark of the trained policy; writes the report.",
}


def _make_stage_flow(stage: str):
    """One Prefect flow per stage, so each can be a deployment of its own (infra/prefect.yaml, entrypoint
    ``flows/stages.py:<stage>_flow``) and be retried alone. Built here once instead of five copies; the explicit
    signature is what Prefect shows as the deployment's parameters."""

    def stage_flow(run: str, recipe: str = DEFAULT_RECIPE, overrides: dict[str, Any] | None = None,
                   runner: str = "local", force: bool = False, retries: int = DEFAULT_RETRIES,
                   retry_delay_s: float = DEFAULT_RETRY_DELAY_S, module_prefix: str = "steps",
                   runner_options: dict[str, Any] | None = None) -> dict[str, Any]:
        return configured_stage_task(stage, retries, retry_delay_s)(
            stage, run, recipe, overrides, runner, force, module_prefix, runner_options)

    stage_flow.__name__ = stage_flow.__qualname__ = f"{stage}_flow"
    stage_flow.__doc__ = STAGE_FLOW_DOCS[stage]
    return flow(name=f"kernelrl-{stage}", flow_run_name=f"{{run}}-{stage}")(stage_flow)


augment_flow = _make_stage_flow("augment")
sft_flow = _make_stage_flow("sft")
selfsup_flow = _make_stage_flow("selfsup")
crl_flow = _make_stage_flow("crl")
bench_flow = _make_stage_flow("bench")

STAGE_FLOWS = {"augment": augment_flow, "sft": sft_flow, "selfsup": selfsup_flow, "crl": crl_flow,
               "bench": bench_flow}
