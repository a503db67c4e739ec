"""``kernelrl pipeline``: run the whole pipeline (or part of it) as a Prefect flow, and show a run's stages.

A command of the orchestration layer: the kernelrl CLI finds it through its plugin registry (the
``kernelrl.cli`` entry point group in pyproject.toml), so the library itself never imports flows/.

    kernelrl pipeline run --recipe smoke --run smoke                  # all stages; done ones are skipped
    kernelrl pipeline run --recipe smoke --run smoke --from sft       # force sft, selfsup, crl, bench
    kernelrl pipeline run --recipe smoke --run smoke --only bench --force
    kernelrl pipeline run --recipe h100x8 --run r1 --runner docker --set crl.steps=200
    kernelrl pipeline status --run smoke [--json]

Without PREFECT_API_URL the flow runs on a temporary in-process Prefect server (no set-up); with it, the run
shows in that server's UI. Exit status: 0 done, 1 a stage failed (rerun the same command to resume: finished
stages are skipped), 2 bad input.

The console shows a few lines per stage (started, progress every KERNELRL_LOG_EVERY training steps with the
numbers that matter, warnings, done with its headline metrics) and a summary table; each stage's whole output is
in <home>/runs/<run>/logs/<stage>.log, the full training metrics in TensorBoard files (KERNELRL_REPORT_TO) and
the Prefect UI keeps every line. ``--verbose`` prints everything, Prefect's own lines included.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Optional

import typer
from kernelrl.errors import ConfigError, KernelRLError
from kernelrl.step import DEFAULT_RECIPE


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Run the training pipeline as Prefect flows; show a run's stages.",
                        no_args_is_help=True)

    @group.command("run")
    def run_cmd(
        run: str = typer.Option(..., "--run", help="Run name: groups stage records, checkpoints and the report."),
        recipe: str = typer.Option(DEFAULT_RECIPE, "--recipe", help="Recipe name (recipes/*.yaml) or a YAML path."),
        from_stage: Optional[str] = typer.Option(
            None, "--from", help="Force this stage and every later one to run again (earlier ones skip if done)."),
        only: Optional[str] = typer.Option(None, "--only", help="Run just this stage (its upstream must be done)."),
        force: bool = typer.Option(False, "--force", help="Re-run selected stages even when nothing changed."),
        runner: str = typer.Option("local", "--runner",
                                   help="local: a process per step (embedded default); docker: a container per step."),
        sets: list[str] = typer.Option([], "--set", metavar="KEY=VALUE",
                                       help="Override a recipe value, e.g. --set sft.epochs=1 (repeatable)."),
        retries: int = typer.Option(2, "--retries", min=0,
                                    help="Retries per stage for crashes (not for bad input), with backoff."),
        retry_delay: float = typer.Option(30.0, "--retry-delay", min=0.0,
                                          help="Seconds before the first retry; doubles each time."),
        module_prefix: str = typer.Option("steps", "--steps-module", hidden=True,
                                          help="Package holding the step modules (tests use tests.fake_steps)."),
        verbose: bool = typer.Option(False, "--verbose", "-v",
                                     help="Print every line of every step and Prefect's own log lines too."),
    ) -> None:
        """Run augment -> sft -> selfsup -> crl -> bench; print a summary and where the report is."""
        _console(verbose)  # before Prefect is imported: its console handler reads its level at set-up
        from flows.pipeline import ensure_prefect_env, log_temporary_server, report_path, select_stages
        from kernelrl.config.recipes import load_recipe
        from kernelrl.step import load_overrides, split_sets

        overrides = split_sets(sets)
        load_recipe(recipe, load_overrides(overrides))  # bad recipe or --set: one line, exit 2, before Prefect
        plan = select_stages(from_stage, only)
        if runner not in ("local", "docker"):
            raise ConfigError(f"--runner {runner!r}: expected local or docker")
        for stage, _ in plan:
            if not _step_exists(module_prefix, stage):
                raise ConfigError(f"step module {module_prefix}.{stage} does not exist yet")
        ensure_prefect_env()
        resume = resume_command(run, recipe, sets, runner, module_prefix)
        typer.echo(f"pipeline {run}: recipe {recipe}, {' -> '.join(s for s, _ in plan)} ({runner} runner)")
        from flows import interrupt
        from flows.pipeline import pipeline

        if not verbose:
            _quiet_prefect_errors()
            log_temporary_server(_log_path(run, "prefect-server"))
        interrupt.install(resume, run)  # Ctrl-C: stop the step, one line, exit 130 (flows/interrupt.py)
        try:
            state = pipeline(run=run, recipe=recipe, from_stage=from_stage, only=only, force=force,
                             overrides=overrides, runner=runner, retries=retries, retry_delay_s=retry_delay,
                             module_prefix=module_prefix, return_state=True)
        except Exception as e:  # Prefect itself failed (its temporary server did not start, the API went away)
            raise typer.Exit(_failed(run, resume, e, None)) from None
        finally:
            interrupt.uninstall()
        if not state.is_completed():
            raise typer.Exit(_failed(run, resume, state.result(raise_on_failure=False), state.message))
        result = state.result()
        report = result.get("report") or report_path(_bench_manifest(run))
        _summary(run, result)
        typer.echo(f"report: {report}" if report else "report: none (bench did not run in this invocation)")
        _where(run)

    @group.command("status")
    def status_cmd(
        run: str = typer.Option(..., "--run", help="Run name."),
        as_json: bool = typer.Option(False, "--json", help="Print the stage records as JSON."),
    ) -> None:
        """Show each stage of a run: status, attempts, cache key, error, outputs."""
        records = _records(run)
        if as_json:
            typer.echo(json.dumps(records, indent=1, default=str))
            return
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"run {run}")
        for col in ("stage", "status", "attempts", "cache key", "error"):
            table.add_column(col, overflow="fold")
        outputs = []
        for stage, rec in records.items():
            if rec is None:
                table.add_row(stage, "-", "", "", "")
                continue
            table.add_row(stage, rec["status"], str(rec.get("attempts") or 0), (rec.get("cache_key") or "")[:12],
                          str(rec.get("error") or ""))
            outputs += [(stage, k, v) for k, v in ((rec.get("manifest") or {}).get("outputs") or {}).items() if v]
        Console().print(table)
        # Outputs as plain lines, whole: a path cut or wrapped by the table cannot be copied (issue 33).
        for stage, name, value in outputs:
            typer.echo(f"{stage} {name}: {value}")

    app.add_typer(group, name="pipeline")


def resume_command(run: str, recipe: str, sets: list[str], runner: str, module_prefix: str) -> str:
    """The command that resumes this run: same recipe, run, --set values (they are part of the stages' cache
    keys: without them every stage would run again) and runner; finished stages skip."""
    import shlex

    parts = ["kernelrl", "pipeline", "run", "--recipe", recipe, "--run", run]
    for item in sets:
        parts += ["--set", item]
    if runner != "local":
        parts += ["--runner", runner]
    if module_prefix != "steps":
        parts += ["--steps-module", module_prefix]
    return " ".join(shlex.quote(p) for p in parts)


def _failed(run: str, resume: str, err, message: str | None) -> int:
    """A failed run: one line on stderr (stage, reason, the next command), the traceback appended to the
    stage's log; returns the exit status (2: bad input or an upstream stage missing, which retrying cannot fix;
    1: a failure that a rerun may get past)."""
    import re
    import traceback

    from flows.runner import StepFailed

    exc = err if isinstance(err, BaseException) else None
    stage = getattr(exc, "pipeline_stage", None) or getattr(exc, "stage", None) or "pipeline"
    text = (str(exc).splitlines() or [""])[0] if exc is not None else ""
    reason = (text or (type(exc).__name__ if exc else message) or "failed").removeprefix(f"step {stage}: ")
    reason, _, log = reason.partition(" (full log: ")
    log = log.rstrip(")") or str(_log_path(run, stage))
    user = isinstance(exc, KernelRLError) or (isinstance(exc, StepFailed) and not exc.retryable)
    upstream = re.search(r"upstream stage '(\w+)'", reason)
    if upstream:
        reason = reason.split("; run it first")[0]
        line = f"stage {stage} cannot start: {reason}; next: {resume} --from {upstream[1]}"
    elif user:
        reason = reason.removeprefix("user error (exit 2): ").removeprefix("error: ")
        line = f"stage {stage}: bad input: {reason} (log: {log}); next: correct it and run {resume}"
    elif stage == "pipeline":  # not a stage's failure: Prefect's temporary server, the API, the flow itself
        server = " and " + str(_log_path(run, "prefect-server")) if "Prefect API server" in reason else ""
        line = f"failed: {reason} (log: {log}{server}); next: {resume} (finished stages skip)"
    else:
        line = f"stage {stage} failed: {reason} (log: {log}); next: {resume} (finished stages skip)"
    if exc is not None:
        _append_log(log, f"pipeline {run}: {line}", "".join(traceback.format_exception(exc)))
    typer.secho(f"error: pipeline {run}: {line}", err=True, fg=typer.colors.RED)
    _where(run)
    return 2 if user or upstream else 1


def _log_path(run: str, stage: str):
    from flows.stages import stage_log_path
    from kernelrl.config.settings import load_settings

    return stage_log_path(load_settings(), run, stage)


def _append_log(path: str, headline: str, trace: str) -> None:
    """The traceback goes to the stage log (the console gets one line)."""
    import time
    from pathlib import Path

    try:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a", errors="replace") as f:
            f.write(f"===== {time.strftime('%Y-%m-%d %H:%M:%S')} {headline}\n{trace}")
    except OSError:
        pass


def _quiet_prefect_errors() -> None:
    """Prefect's console handler prints a failed task's and flow's exception with its traceback (45-53 lines for
    one missing upstream stage); the command prints one line for it instead and the stage log keeps the
    traceback. Its warnings still show; ``--verbose`` shows everything."""
    import logging

    try:
        from prefect.logging.handlers import PrefectConsoleHandler
    except ImportError:
        return

    class NoErrors(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return record.levelno < logging.ERROR

    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    for lg in loggers:
        for h in lg.handlers:
            if isinstance(h, PrefectConsoleHandler) and not any(isinstance(f, NoErrors) for f in h.filters):
                h.addFilter(NoErrors())


def _console(verbose: bool) -> None:
    """The run's console: our ``kernelrl.console`` lines on stdout; Prefect's console handler only for warnings
    and errors unless ``verbose`` (the Prefect UI and the stage log files keep everything either way)."""
    import logging
    import os
    import sys

    if verbose:  # the handler's own default, everything the loggers pass (the string "0" breaks its dictConfig)
        os.environ["PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"] = "NOTSET"
    else:
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
    con = logging.getLogger("kernelrl.console")
    if not any(getattr(h, "_kernelrl_console", False) for h in con.handlers):
        h = logging.StreamHandler(sys.stdout)
        h.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
        h._kernelrl_console = True
        con.addHandler(h)
    con.setLevel(logging.INFO)
    con.propagate = False


def _summary(run: str, result: dict) -> None:
    """One table: each stage of this invocation, its status, wall time and headline numbers."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from flows.stages import headline_metrics

    table = Table(title=f"pipeline {run}", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("stage", "status", "wall s", "numbers"):
        table.add_column(col, no_wrap=col != "numbers")
    manifests = result.get("manifests") or {}
    for stage, status in result["stages"].items():
        m = manifests.get(stage) or {}
        table.add_row(stage, status + (" (earlier run)" if status == "skipped" else ""), str(m.get("wall_s", "")),
                      headline_metrics(m))
    Console(width=max(120, Console().width), soft_wrap=False).print(table)  # one row per stage in a log


def _where(run: str) -> None:
    """Where the rest is: the stage logs and the TensorBoard files."""
    from kernelrl.config.settings import load_settings

    settings = load_settings()
    runs = settings.home.resolve() / "runs" / run
    typer.echo(f"logs: {runs / 'logs'}")
    if "tensorboard" in settings.report_to and any(runs.glob("*/**/tb")):
        typer.echo(f"metrics: tensorboard --logdir {runs}")


def _step_exists(module_prefix: str, stage: str) -> bool:
    """Is ``<module_prefix>.<stage>`` importable by the step runner (which runs in the repository root)?"""
    from flows.runner import REPO_ROOT

    if (REPO_ROOT / module_prefix.replace(".", "/") / f"{stage}.py").exists():
        return True
    try:
        return importlib.util.find_spec(f"{module_prefix}.{stage}") is not None
    except ModuleNotFoundError:
        return False


def _records(run: str) -> dict:
    from kernelrl.config.settings import load_settings
    from kernelrl.config.settings import redact_url
    from kernelrl.store import Store
    from kernelrl.step import STAGES

    settings = load_settings()
    store = Store(settings.resolved_store_url)
    try:
        store.upgrade()
        records = {s: store.stage_record(run, s) for s in STAGES}
    finally:
        store.engine.dispose()
    if not any(records.values()):
        raise KernelRLError(f"run {run!r}: no stages recorded in {redact_url(settings.resolved_store_url)}")
    return records


def _bench_manifest(run: str) -> dict | None:
    try:
        rec = _records(run).get("bench")
    except KernelRLError:
        return None
    return (rec or {}).get("manifest") if rec and rec.get("status") == "done" else None
