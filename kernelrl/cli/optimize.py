"""``kernelrl optimize``: contrastive search for a faster ModelNew with a frozen LLM.

    kernelrl optimize TASK.py --llm https://api.deepseek.com/v1#deepseek-chat --rounds 5 --samples 4 --out best.py
    kernelrl optimize 09_Swish --llm http://127.0.0.1:8000/v1#Qwen/Qwen2.5-Coder-7B-Instruct --device cuda
    kernelrl optimize 09_Swish --llm vllm:Qwen/Qwen2.5-Coder-7B-Instruct --sampler island --run swish-1
    kernelrl optimize 09_Swish --llm tiny --rounds 1 --samples 2 --max-tokens 64 --device cpu   # offline smoke
    kernelrl optimize 09_Swish --llm URL#MODEL --run swish-1 --rounds 10    # resume/extend run swish-1

TASK is a KernelBench-format file or a built-in task name/key. Every attempt, candidate and evaluation goes
to the store (KERNELRL_STORE_URL, default <KERNELRL_HOME>/store.db); the API key comes from
KERNELRL_LLM_API_KEY and is never printed. See kernelrl/llm/README.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from kernelrl.errors import ConfigError

console = Console()
SAMPLERS = ("bucket", "island", "random")


def _table(rows, title: str) -> Table:
    t = Table(title=title, caption="stored: evaluations taken from the store (earlier runs of the same source; "
              "--remeasure times them again)")
    for col, just in (("round", "right"), ("prompt", "left"), ("attempts", "right"), ("parsed", "right"),
                      ("correct", "right"), ("stored", "right"), ("best (round)", "right"), ("best", "right"),
                      ("time", "right")):
        t.add_column(col, justify=just)
    for r in rows:
        t.add_row(str(r.round), r.kind, str(r.attempts), str(r.parsed), str(r.correct), str(r.stored or "-"),
                  f"{r.best_round:.2f}x" if r.best_round else "-", f"{r.best:.2f}x" if r.best else "-",
                  f"{r.elapsed_s:.0f}s")
    return t


def optimize(
    task: str = typer.Argument(..., help="Task file (KernelBench format) or a built-in task name/key."),
    llm: str = typer.Option(None, "--llm", help="http(s)://host/v1#model (OpenAI-compatible), vllm:PATH_OR_ID, "
                            "a local HF model path/id, or 'tiny' (offline test model). Default: "
                            "KERNELRL_LLM_BASE_URL#KERNELRL_LLM_MODEL."),
    rounds: int = typer.Option(5, help="Total rounds of the run (a resumed run continues up to this)."),
    samples: int = typer.Option(4, help="Samples (prompts) per round."),
    sampler: str = typer.Option("bucket", help="Exemplar sampling: bucket (the paper's), island, or random."),
    exemplars: int = typer.Option(2, "--exemplars", help="Exemplars per contrastive prompt (the paper's N=2)."),
    bucket_width: float = typer.Option(0.1, help="Bucket sampler: score bucket width."),
    tau: float = typer.Option(1.0, help="Bucket sampler: softmax temperature over centred bucket means."),
    out: Path = typer.Option(None, "--out", help="Write the best verified ModelNew here (speedup in a header)."),
    run: str = typer.Option(None, "--run", help="Run name; an existing run is resumed. Default: a new name."),
    device: str = typer.Option("auto", help="Evaluation device: cpu, cuda, cuda:N or auto."),
    llm_device: str = typer.Option("auto", help="Device of a local transformers model (cpu, cuda, auto)."),
    budget_s: float = typer.Option(None, "--max-wall-s", help="Wall-clock cap on the whole search in seconds, "
                                   "checked each round (--budget-s means timing seconds per candidate elsewhere: "
                                   "here that is --eval-budget-s)."),
    max_tokens: int = typer.Option(4096, help="Completion token budget (kernels are long)."),
    temperature: float = typer.Option(0.8, help="Sampling temperature (0: greedy)."),
    max_prompt_tokens: int = typer.Option(12000, help="Prompt budget; exemplars are cut/dropped to fit."),
    eval_budget_s: float = typer.Option(None, help="Timing seconds per candidate (default: the EvalConfig's)."),
    correctness_trials: int = typer.Option(None, help="Correctness input sets per candidate (default: EvalConfig's)."),
    concurrency: int = typer.Option(8, help="HTTP backend: requests in flight at once."),
    timeout_s: float = typer.Option(600.0, help="HTTP backend: seconds per request before a retry."),
    max_retries: int = typer.Option(5, help="HTTP backend: retries on timeouts, 429 and 5xx."),
    seed: int = typer.Option(0, help="Seed of exemplar draws and (where supported) sampling."),
    pool: str = typer.Option("run", help="Exemplar pool: run (this run's verified candidates only: the search "
                             "starts from the reference alone) or task (every verified candidate of the task in "
                             "the store, e.g. seeds and earlier runs)."),
    remeasure: bool = typer.Option(False, "--remeasure", help="Evaluate every candidate of the run again now "
                                   "instead of taking stored evaluations (a resumed run, or a source scored "
                                   "before); stored numbers are labelled with their date and evaluator."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of tables."),
) -> None:
    """Contrastive search with a frozen LLM: prompts from the store, generate, evaluate, keep the best."""
    from dataclasses import replace

    from kernelrl.config.stages import EvalConfig, SamplerConfig
    from kernelrl.search.loop import SearchConfig

    if sampler not in SAMPLERS:
        raise ConfigError(f"--sampler: expected one of {', '.join(SAMPLERS)}, got {sampler!r}")
    if exemplars < 0:
        raise ConfigError(f"--exemplars: must be >= 0, got {exemplars}")
    cfg = SearchConfig(rounds=rounds, samples=samples, max_tokens=max_tokens, temperature=temperature,
                       budget_s=budget_s, max_prompt_tokens=max_prompt_tokens, seed=seed, pool=pool,
                       remeasure=remeasure, sampler=SamplerConfig(kind=sampler, n_exemplars=exemplars,
                                                                  bucket_width=bucket_width, temperature=tau))
    cfg.validate()
    ev = EvalConfig(device=device)
    if eval_budget_s is not None:
        ev = replace(ev, budget_s=eval_budget_s)
    if correctness_trials is not None:
        ev = replace(ev, correctness_trials=correctness_trials)
    _search(task, _llm_spec(llm), cfg, ev, out=out, run=run, as_json=as_json,
            backend_kwargs={"device": llm_device, "concurrency": concurrency, "timeout_s": timeout_s,
                            "max_retries": max_retries})


def _llm_spec(llm: str | None) -> str:
    if llm:
        return llm
    from kernelrl.config.settings import get_settings

    s = get_settings()
    if not s.llm_base_url:
        raise ConfigError("--llm: give a model (URL#MODEL, vllm:ID, a local path or 'tiny') or set "
                          "KERNELRL_LLM_BASE_URL and KERNELRL_LLM_MODEL")
    return f"{s.llm_base_url}#{s.llm_model or ''}"


def _search(task: str, llm: str, cfg, ev, *, out: Path | None, run: str | None, as_json: bool,
            backend_kwargs: dict) -> None:
    """The model first (built and checked: an unreachable or misconfigured one is a one-line error before any
    table), then the search with a live table, then the summary."""
    from kernelrl.search.loop import default_run_name, make_backend_for, optimize_task
    from kernelrl.store import Store
    from kernelrl.tasks import get_task

    t = get_task(task)
    run = run or default_run_name(t, llm)
    store = Store()
    store.ensure_ready()
    backend = make_backend_for(llm, backend_kwargs)
    try:
        backend.check()
        rows = []
        title = f"optimize {t.key} with {llm.split('#')[-1] if '#' in llm else llm} (run {run})"
        live = (Live(_table(rows, title), console=console, refresh_per_second=2, transient=False)
                if not as_json else None)

        def progress(stats, _result) -> None:
            rows.append(stats)
            if live is not None:
                live.update(_table(rows, title))

        if live is not None:
            live.start()
        try:
            res = optimize_task(t, llm=backend, sampler=cfg.sampler, run_name=run, store=store, eval_config=ev,
                                config=cfg, out=out, progress=progress)
        except KeyboardInterrupt:
            if live is not None:
                live.stop()
            console.print(f"interrupted: everything so far is stored; resume with --run {run}")
            raise typer.Exit(130) from None
        finally:
            if live is not None and live.is_started:
                live.stop()
                console.print()
    finally:
        backend.close()
    _summary(res, out, as_json)


def _summary(res, out: Path | None, as_json: bool) -> None:
    """The run's totals and its best kernel, its number labelled with where it comes from; exit 1 when every
    request to the model failed in this invocation (nothing could be generated)."""
    generated = sum(r.generated for r in res.rounds)
    failed = sum(r.failed_requests for r in res.rounds)
    if as_json:
        typer.echo(json.dumps(res.to_dict(), default=str))
    else:
        u = res.usage
        cost = f", ~${u.get('cost_usd', 0):.4f}" if u.get("cost_usd") else ""
        console.print(f"run {res.run_name}: {res.rounds_done} rounds, {res.attempts} attempts, {res.parsed} parsed, "
                      f"{res.correct} correct; tokens {u.get('prompt_tokens', 0)} in / "
                      f"{u.get('completion_tokens', 0)} out{cost}" + (" (stopped: budget)" if res.stopped == "budget"
                                                                       else ""))
        if res.best:
            b = res.best
            where = f" -> {res.out_path}" if res.out_path else " (pass --out FILE to write it)"
            origin = ("from the store: " if b.get("from_store") else "measured ") + (
                f"{b.get('evaluated_at')} UTC, {b.get('evaluator_version')}, {b.get('device_type')}")
            console.print(f"best: {b['speedup']:.2f}x ({origin}; candidate {b['candidate_id']}, round {b['round']})"
                          f"{where}" + ("; --remeasure times it again" if b.get("from_store") else ""))
        else:
            console.print("no verified candidate yet" + (f"; nothing written to {out}" if out else ""))
        stored, shown = sum(r.stored for r in res.rounds), sum(r.evaluated for r in res.rounds)
        if stored:
            console.print(f"{stored} of the {shown} evaluations above come from the store (measured before this "
                          "command, column 'stored'); --remeasure times them again")
    if generated and failed == generated:
        last = next((r.last_error for r in reversed(res.rounds) if r.last_error), "")
        typer.secho(f"error: every request to the model failed ({failed} of {generated}): {last}", err=True,
                    fg=typer.colors.RED)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("optimize")(optimize)
