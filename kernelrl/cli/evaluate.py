"""``kernelrl eval TASK.py CANDIDATE.py``: one hardened evaluation, as JSON or a readable summary."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import typer


def eval_cmd(
    task: str = typer.Argument(..., help="Task file (KernelBench format) or a built-in task name/key."),
    candidate: Path = typer.Argument(..., help="Candidate file defining ModelNew."),
    device: str = typer.Option("auto", help="cpu, cuda, cuda:N or auto."),
    budget_s: float = typer.Option(None, "--budget-s", help="Seconds of paired timing."),
    correctness_trials: int = typer.Option(None, "--correctness-trials", help="Fresh input sets checked."),
    load_timeout_s: float = typer.Option(None, "--load-timeout-s", help="Seconds the candidate's import and "
                                         "ModelNew(...) may take outside a compiler (default: EvalConfig's 30; a "
                                         "loop at import time fails after this, not after the compile allowance)."),
    eval_mode: bool = typer.Option(False, "--eval-mode", help="Build both modules in eval mode (default train)."),
    store: bool = typer.Option(False, "--store", help="Also record the result in the exemplar store."),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object."),
) -> None:
    """Evaluate CANDIDATE against TASK. Exit 0 whenever the evaluation ran, whatever the candidate did."""
    # where a cold command's seconds go, beside evaluate's own phases: this process's age at each step (--json)
    marks = {"cli_ready": process_age()}
    from kernelrl.errors import ConfigError
    from kernelrl.tasks import get_task

    from kernelrl.config.devices import device_name, resolve_device

    t = get_task(task)
    if not candidate.is_file():
        raise ConfigError(f"{candidate}: no such candidate file")
    device = resolve_device(device)  # asks the CUDA driver, not torch (config/devices.py)
    marks["device_named"] = process_age()
    cfg = eval_config(device, eval_mode, budget_s=budget_s, correctness_trials=correctness_trials,
                      load_timeout_s=load_timeout_s)
    source = candidate.read_text(errors="replace")

    from kernelrl.evaluation.static import syntax_failure

    # A source that does not compile is answered here, before any worker or torch import (evaluate gives the same
    # result): 4.7 s of a cold command on the H100, 3.2 s of it torch's import (c24 in
    # bench/results/2026-12-06-h100-kernelbench).
    res = syntax_failure(source, device_name(device))
    if res is None:
        res = _evaluate(t, source, cfg, device, as_json, marks)
    if store:
        from kernelrl.store import Store

        st = Store()
        st.upgrade()
        cid = st.add_candidate(st.upsert_task(t), source, origin_stage="eval")
        st.add_evaluation(cid, res.to_dict(), dataclasses.asdict(cfg))
    marks["evaluated"] = process_age()
    if as_json:
        # command_s: this process's age (s) with its CLI imported, its device named, its workers started, torch
        # imported, the result in hand (the exit after printing is not in it)
        typer.echo(json.dumps({**res.to_dict(), "command_s": marks}))
        return
    print_summary(t.key, res)


def _evaluate(t, source: str, cfg, device: str, as_json: bool, marks: dict):
    """The evaluation of a source that compiles: its workers started before this process imports torch."""
    from kernelrl.evaluation.spares import prestart

    # This evaluation's workers start now, before this process imports torch, so the two imports overlap:
    # the cold command on an H200 spent ~4 s in its own torch import, then ~4.5 s waiting for its workers'
    # (bench/results/2026-11-29-h200-cold-eval).
    prestart(cfg, device, cand_source=source)  # a torch.compile candidate's worker imports it too
    marks["workers_started"] = process_age()
    from kernelrl.evaluation import evaluate  # imports torch: only once the input is known to be good
    from kernelrl.evaluation import session as eval_session

    # One evaluation and exit: no spare workers started for a next one (prestart's are this evaluation's own). On
    # a GPU the default starts two per role in the background, whose interpreters and device contexts compete with
    # this evaluation's own start (the cold command took 27 s on the H100 x4, 7 s of it the reference's start:
    # bench/results/2026-11-28-h100x4-evaluator-v13)
    eval_session.SPARE_WORKERS = 0
    marks["torch_imported"] = process_age()
    if as_json:
        from kernelrl.errors import KernelRLError

        try:
            return evaluate(t, source, cfg)
        except KernelRLError as e:  # --json promises one object on stdout, also when the task itself fails;
            # stderr keeps the one `error:` line every user error prints (kernelrl.cli.main)
            typer.echo(json.dumps({"error": str(e), "error_type": type(e).__name__, "task": t.key}))
            raise
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True)) as bar:  # stderr: stdout keeps the result (pipes, --json)
        tid = bar.add_task("evaluating", total=1.0)
        return evaluate(t, source, cfg, progress=lambda f, what: bar.update(tid, completed=f, description=what))

def eval_config(device: str, eval_mode: bool, **given):
    """The command's EvalConfig: the defaults, with the options the user gave (None: not given), validated."""
    from kernelrl.config.recipes import validate_values
    from kernelrl.config.stages import EvalConfig

    cfg = dataclasses.replace(EvalConfig(device=device, train_mode=not eval_mode),
                              **{k: v for k, v in given.items() if v is not None})
    validate_values(cfg, "eval")
    return cfg


def process_age() -> float | None:
    """Seconds since this process started, from the kernel's own clock (Linux /proc, 10 ms ticks; None elsewhere):
    the interpreter's start and the imports before any line of ours are in it, which a timer started here would miss."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return round(up - ticks / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, ValueError, IndexError):
        return None


def print_summary(task_key: str, res) -> None:
    """The readable result: the verdict, the timing with its clock, the eager estimate, fatal flags' meanings."""
    from kernelrl.evaluation.flags import FATAL, describe

    tm = res.timing or {}
    timed = tm.get("estimate") is not None  # a candidate that failed before its timed blocks has no timing line
    typer.echo(f"task        {task_key}\ndevice      {res.device_type}\nexecutable  {res.executable}\n"
               f"correct     {res.correct}\nspeedup     {res.speedup:.2f}x\nflags       {', '.join(res.flags) or '-'}")
    if timed:
        typer.echo(f"timing      estimate {tm.get('estimate')}x, "
                   f"95% interval [{tm.get('ci_low')}, {tm.get('ci_high')}] "
                   f"(the score is its lower bound), {tm.get('rounds')} paired spans of {tm.get('calls_per_round')} "
                   f"calls, stopped by {tm.get('stop')}; ref {tm.get('ref_median_ms')} ms, cand "
                   f"{tm.get('cand_median_ms')} ms per call")
    rv = tm.get("reverify") if isinstance(tm, dict) else None
    if isinstance(rv, dict) and rv.get("why"):
        typer.echo(f"reverify    {rv['why']}")
    if timed:
        # device_type is "cpu" or the GPU's name (EvalResult)
        typer.echo(f"clock       {CLOCK_NOTE['cpu' if res.device_type in ('cpu', None, '') else 'cuda']}")
    line = eager_line(tm.get("eager") if isinstance(tm, dict) else None)
    if line:
        typer.echo(line)
    for f in res.flags:  # what each flag means (kernelrl/evaluation/flags.py), fatal ones first
        if f in FATAL:
            typer.echo(f"  {f}: {describe(f)}")
    if res.error:
        typer.echo(f"error       {res.error.splitlines()[0][:300]}")


# What the speedup compares, shown under every readable result (issue 32: users compare our numbers with the
# paper's and KernelBench's, which time eager calls with the host in them).
CLOCK_NOTE = {
    "cuda": "GPU time per call with launch overhead removed on both sides (CUDA-graph replay or the held clock); "
            "the paper and KernelBench time eager calls, host included, so their ratios differ",
    "cpu": "wall time per call in paired spans, the harness's fixed overhead subtracted on both sides",
}


def eager_line(e) -> str:
    """The eager estimate's line (``timing.eager``: KernelBench-style per-call times, host included; report-only), or
    '' when the evaluation has none."""
    if not isinstance(e, dict):
        return ""
    if e.get("error") or e.get("skipped"):
        return f"eager est.  not measured ({str(e.get('error') or e.get('skipped')).splitlines()[0][:200]})"
    try:
        return (f"eager est.  {float(e['speedup']):.2f}x (ref {float(e['ref_ms']):.4g} ms, cand "
                f"{float(e['cand_ms']):.4g} ms per call, host included; not the reward)")
    except (KeyError, TypeError, ValueError):
        return ""


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_cmd)
