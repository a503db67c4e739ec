"""The ``pipeline`` flow: augment -> sft -> selfsup -> crl -> bench, one Prefect task per stage.

    kernelrl pipeline run --recipe smoke --run smoke                 # the embedded default (make pipeline)
    kernelrl pipeline run --recipe smoke --run smoke --from sft      # force sft and everything after it
    kernelrl pipeline run --recipe smoke --run smoke --only bench    # one stage (upstream must be done)
    prefect deployment run kernelrl-pipeline/scheduled               # on a server (infra/prefect.yaml)

    from flows.pipeline import pipeline
    pipeline(run="smoke", recipe="smoke", from_stage="crl")

A stage that is done with unchanged inputs is skipped (flows/stages.py says how); a failed stage is retried
by its task with backoff, and when it finally fails the pipeline stops there: the next run (or ``prefect
flow-run retry <id>``) skips the stages that finished and resumes at the failed one. Without
``PREFECT_API_URL`` Prefect runs a temporary server as a child process (``ensure_prefect_env`` sets its start-up
timeout and switches telemetry off; the CLI sends its output to ``<home>/runs/<run>/logs/prefect-server.log``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefect import flow

from flows.fleet import fleet_for
from flows.stages import DEFAULT_RETRIES, DEFAULT_RETRY_DELAY_S, artifact_key, configured_stage_task
from kernelrl.errors import ConfigError
from kernelrl.step import DEFAULT_RECIPE, STAGES

# Prefect without a server on a cold 2-core machine: start-up can exceed a minute (shared/notes/stack.md);
# telemetry fails slowly offline.
PREFECT_ENV_DEFAULTS = {
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
}


def ensure_prefect_env(environ: dict[str, str] | None = None) -> None:
    """Set the ephemeral-server defaults above where the environment does not already say otherwise."""
    environ = os.environ if environ is None else environ
    for k, v in PREFECT_ENV_DEFAULTS.items():
        environ.setdefault(k, v)


def log_temporary_server(log_path: Path) -> None:
    """Prefect's temporary server (started when no ``PREFECT_API_URL`` is set) writes to ``log_path`` instead of
    this console. It is a child in the terminal's process group, so a Ctrl-C reaches it too; uvicorn then re-raises
    the signal and printed a 25-line KeyboardInterrupt traceback after the command's one line (CI, 2026-11-29).
    Only the server's start is redirected (Prefect starts it lazily, on the flow's first API call): our file
    descriptors 1 and 2 point at the log for the instant its process is forked, and back."""
    try:
        from prefect.server.api.server import SubprocessASGIServer
        from prefect.settings import PREFECT_API_URL
    except ImportError:
        return
    if PREFECT_API_URL.value():  # a server of its own (or a test harness's): nothing is started here
        return
    server = SubprocessASGIServer()  # the instance every Prefect client takes when no API URL is set
    launch = server._run_uvicorn_command
    if getattr(launch, "kernelrl_log", None) is not None:
        return

    def launch_logged():
        log_path.parent.mkdir(parents=True, exist_ok=True)
        saved = [os.dup(1), os.dup(2)]
        try:
            with open(log_path, "ab") as log:
                os.dup2(log.fileno(), 1)
                os.dup2(log.fileno(), 2)
                return launch()
        finally:
            for fd, copy in ((1, saved[0]), (2, saved[1])):
                os.dup2(copy, fd)
                os.close(copy)

    launch_logged.kernelrl_log = log_path
    server._run_uvicorn_command = launch_logged


def select_stages(from_stage: str | None = None, only: str | None = None,
                  stages: list[str] | None = None) -> list[tuple[str, bool]]:
    """``[(stage, forced)]`` to run, in order. ``--from X`` forces X and what follows; ``--only X`` runs X."""
    for name, value in (("--from", from_stage), ("--only", only)):
        if value is not None and value not in STAGES:
            raise ConfigError(f"{name} {value!r}: expected one of {', '.join(STAGES)}")
    if from_stage and only:
        raise ConfigError("--from and --only cannot be combined (--only X --force re-runs one stage)")
    chosen = list(stages or STAGES)
    unknown = [s for s in chosen if s not in STAGES]
    if unknown:
        raise ConfigError(f"stage {unknown[0]!r}: expected one of {', '.join(STAGES)}")
    chosen = [s for s in STAGES if s in chosen]  # always in pipeline order
    if only:
        return [(only, False)]
    start = STAGES.index(from_stage) if from_stage else len(STAGES)
    return [(s, STAGES.index(s) >= start) for s in chosen]


def report_path(manifest: dict[str, Any] | None) -> str | None:
    """Where a bench manifest says its report is (``outputs.report``, else the first ``*.md`` output)."""
    outs = (manifest or {}).get("outputs") or {}
    if isinstance(outs.get("report"), str):
        return outs["report"]
    for v in outs.values():
        if isinstance(v, str) and v.endswith(".md"):
            return v
    return None


def _summary_markdown(run: str, recipe: str, results: dict[str, dict[str, Any]], failed: tuple[str, str] | None
                      ) -> str:
    lines = [f"# Pipeline run `{run}` (recipe `{recipe}`)", "", "| stage | status | wall s | cache key |",
             "|---|---|---|---|"]
    for stage in STAGES:
        r = results.get(stage)
        if r is not None:
            wall = (r.get("manifest") or {}).get("wall_s", "")
            lines.append(f"| {stage} | {r['status']} | {wall} | `{(r.get('cache_key') or '')[:12]}` |")
        elif failed and failed[0] == stage:
            lines.append(f"| {stage} | **failed** | | |")
    if failed:
        lines += ["", f"**{failed[0]} failed**: {failed[1]}", "",
                  f"Resume: `kernelrl pipeline run --recipe {recipe} --run {run}` (finished stages are skipped) "
                  "or `prefect flow-run retry <flow-run-id>`."]
    report = report_path((results.get("bench") or {}).get("manifest"))
    if report:
        lines += ["", f"Report: `{report}`"]
    return "\n".join(lines) + "\n"


def _note_flow_run() -> None:
    """Tell the Ctrl-C handler (flows/interrupt.py) which flow run to mark cancelled."""
    try:
        from prefect.runtime import flow_run

        from flows.interrupt import note_flow_run

        note_flow_run(flow_run.id)
    except Exception:
        pass


@flow(name="kernelrl-pipeline", flow_run_name="{run}")
def pipeline(run: str, recipe: str = DEFAULT_RECIPE, from_stage: str | None = None, only: str | None = None,
             force: bool = False, overrides: dict[str, Any] | None = None, runner: str = "local",
             retries: int | dict[str, int] = DEFAULT_RETRIES, retry_delay_s: float = DEFAULT_RETRY_DELAY_S,
             module_prefix: str = "steps", runner_options: dict[str, Any] | None = None,
             stages: list[str] | None = None) -> dict[str, Any]:
    """Run the stages of one pipeline run in order; returns ``{"run", "stages": {stage: status}, "report"}``.

    run: groups the stages (store records, checkpoints, reports). recipe: a name under recipes/ or a YAML path.
    from_stage: force this stage and the later ones. only: run one stage. force: re-run even unchanged stages.
    overrides: dotted recipe keys (``{"sft.epochs": "1"}``). runner: local or docker. retries: per-stage task
    retries (an int or ``{stage: n}``), first retry after retry_delay_s, doubling. module_prefix: where step
    modules live (``steps``; tests use ``tests.fake_steps``). stages: a subset to consider (default all).
    """
    from prefect.artifacts import create_markdown_artifact

    plan = select_stages(from_stage, only, stages)
    _note_flow_run()
    results: dict[str, dict[str, Any]] = {}
    failed = None
    fleet = None
    try:
        # a GPU recipe's evaluator GPUs: one worker process each for the whole run (flows/fleet.py); None otherwise
        fleet = fleet_for(recipe, overrides, run, runner)
        for stage, forced in plan:
            stage_task = configured_stage_task(stage, retries, retry_delay_s)
            results[stage] = stage_task(stage, run, recipe, overrides, runner, force or forced, module_prefix,
                                        runner_options)
    except BaseException as e:
        failed = (next((s for s, _ in plan if s not in results), "?"), str(e).splitlines()[0][:500] if str(e) else
                  type(e).__name__)
        try:
            e.pipeline_stage = failed[0]  # `kernelrl pipeline run` names the stage in its one error line
        except Exception:
            pass
        raise
    finally:
        if fleet is not None:
            fleet.stop()
        try:
            create_markdown_artifact(_summary_markdown(run, recipe, results, failed), key=artifact_key(run, "pipeline"),
                                     description=f"pipeline run {run}")
        except Exception:  # the UI summary must never mask the real outcome
            pass
    return {
        "run": run,
        "recipe": recipe,
        "stages": {s: r["status"] for s, r in results.items()},
        "manifests": {s: r["manifest"] for s, r in results.items()},
        "report": report_path((results.get("bench") or {}).get("manifest")),
    }
