"""``kernelrl bench`` and ``kernelrl ablate``: the paper's tables for any suite and source; technique ablation.

    kernelrl bench --suite builtin --source seeds --out reports/seeds            # score, write the report
    kernelrl bench --source myrun/crl --source myrun/augment+sft+selfsup --label "1+2+3" --label "1+2"
    kernelrl bench --source kernels/ --source release.json --levels 1,2 --budget-s 60 --device cuda
    kernelrl bench --source myrun --stored --out r/                              # stored final scores, no timing
    kernelrl bench --source seeds --compare old/report.json                      # side by side with a report
    kernelrl bench --source policy:myrun/crl --source myrun/crl                   # the crl policy; best crl kernel
    kernelrl bench ladder --run myrun                                            # sft / selfsup / crl policies
    kernelrl bench portability --from-device 'NVIDIA H100 80GB HBM3' --device cuda
    kernelrl bench baseline vanilla --llm URL#MODEL --k 5                         # best of k one-shot prompts
    kernelrl bench baseline evolve --llm URL#MODEL --rounds 5                     # contrastive search, frozen model
    kernelrl bench ablations                                                      # the ablation recipes
    kernelrl ablate KERNEL.py --task 02_Softmax --device cuda                     # speedup per technique switched off

``--source`` (repeatable): ``seeds`` | ``seeds:all`` | a directory of ``<task>.py`` | a ``.json``/``.jsonl`` of task
-> code | ``RUN/STAGE[+STAGE]`` | ``run:RUN`` or a run name | ``stage:STAGE`` or a stage name (see
``kernelrl.reports.sources``) | ``policy:RUN/STAGE[@FORMAT]``: fresh samples of a stage's final checkpoint
(``kernelrl.reports.policy``; what the trained model writes, not the best kernel the run found). Every kernel is
scored with the final-evaluation protocol through the evaluation service (stored with purpose 'final');
``--stored`` reports the stored final scores instead.
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from kernelrl.errors import ConfigError, KernelRLError

console = Console(stderr=True)
bench_app = typer.Typer(help="Benchmark reports: the paper's tables for any suite and source, baselines, "
                             "portability, ablations.", invoke_without_command=True, no_args_is_help=False)
baseline_app = typer.Typer(help="Baselines: vanilla (best of k one-shot prompts) and evolve (contrastive search "
                                "with a frozen model).", no_args_is_help=True)
bench_app.add_typer(baseline_app, name="baseline")

ABLATION_RECIPES = """\
The paper's ablations are recipe overrides of the pipeline (each run's crl pool is its own: crl.pool=run),
then one report of the runs' trained policies (fresh samples of each final checkpoint, its own prompt format):

  # stage ladder: stage 1 / 1+2 / 1+2+crl of one run (the policies after sft, selfsup and crl)
  kernelrl pipeline run --recipe R --run abl-bucket --set crl.sampler.kind=bucket
  kernelrl bench ladder --run abl-bucket
  # plain GRPO: the augmentation prompt, no exemplars, no contrastive instruction ("1+2+plain GRPO")
  kernelrl pipeline run --recipe R --run abl-plain --set crl.prompt=plain
  # exemplar sampling: the paper's bucket sampler, island-based (assigned, advanced, migrating), uniform random
  kernelrl pipeline run --recipe R --run abl-island --set crl.sampler.kind=island
  kernelrl pipeline run --recipe R --run abl-random --set crl.sampler.kind=random
  # the table: each run's crl policy (add --source RUN/crl for the best kernel each run found while training)
  kernelrl bench --recipe R --source policy:abl-plain/crl --label "plain GRPO" \\
                 --source policy:abl-random/crl --label random --source policy:abl-island/crl --label island \\
                 --source policy:abl-bucket/crl --label bucket --out reports/ablations
  # the evolve baseline (no training): island sampling, up to 4 exemplars per prompt (the defaults)
  kernelrl bench --recipe R baseline evolve --llm URL#MODEL --rounds 5

Runs that share upstream stages reuse them through the flow's cache (same recipe values up to crl).
crl.sampler.n_exemplars=0 is accepted too: the contrastive prompt with no exemplar (not the paper's plain GRPO)."""


def _levels(levels: str | None) -> list[int] | None:
    if not levels:
        return None
    try:
        return [int(x) for x in levels.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--levels: expected comma-separated integers, got {levels!r}") from None


def _chunk(workers: int) -> int:
    """Kernels submitted together: one per in-process worker; with remote workers (0) a large batch so that
    every `kernelrl worker` has work (the --max-minutes check then happens per batch)."""
    return workers if workers > 0 else 64


def _names(text: str | None) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()] if text else []


def _store(url: str | None):
    from kernelrl.store import Store

    store = Store(url)
    store.upgrade()
    return store


def _recipe_sections(recipe: str | None) -> dict:
    """The recipe's eval settings and its bench section (the final protocol's budget and trials), for
    ``BenchOptions``/``final_config``; none without a recipe (the defaults then)."""
    if not recipe:
        return {"eval_base": None, "bench_base": None}
    from kernelrl.config.recipes import load_recipe

    r = load_recipe(recipe)
    return {"eval_base": r.eval, "bench_base": r.bench, "recipe": r}


def _command() -> str:
    return "kernelrl " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _print_summary(report, paths, as_json: bool) -> None:
    from kernelrl.cli.tables import table_console
    from kernelrl.reports.render import fmt

    if as_json:
        typer.echo(json.dumps({"paths": {k: str(v) for k, v in paths.items()},
                               "summaries": {lbl: {g: s.to_dict() for g, s in groups.items()}
                                             for lbl, groups in report.summaries().items()}}, indent=1))
        return
    t = Table(title=report.title)
    for col in ("source", "n", "mean", "max", "p75", "p50", "p25", "success", "faster", "geomean"):
        t.add_column(col, justify="left" if col == "source" else "right", no_wrap=True)
    for label, groups in report.summaries().items():
        s = groups["all"]
        t.add_row(label, str(s.n), fmt(s.mean), fmt(s.max), fmt(s.p75), fmt(s.p50), fmt(s.p25), str(s.success),
                  str(s.faster), fmt(s.geomean))
    table_console(80 + max((len(lbl) for lbl in report.summaries()), default=0)).print(t)
    typer.echo(f"report: {paths['markdown']}")


def _setup_logging(verbose: bool) -> None:
    from kernelrl.config.settings import load_settings
    from kernelrl.logs import configure_logging

    configure_logging(logging.WARNING, "%(asctime)s %(message)s", load_settings(), stream=sys.stderr)
    logging.getLogger("kernelrl").setLevel(logging.INFO if verbose else logging.WARNING)


@bench_app.callback()
def bench(
    ctx: typer.Context,
    suite: str = typer.Option("builtin", help="builtin, a KernelBench checkout directory, or 'kernelbench' "
                              "(KERNELRL_KERNELBENCH_DIR)."),
    levels: str = typer.Option(None, help="Comma-separated levels, e.g. 1,2 (default: all)."),
    source: list[str] = typer.Option(["seeds"], "--source", "-s", help="What to score (repeatable, one report "
                                     "column each): seeds | seeds:all | DIR | FILE.json | RUN/STAGE[+STAGE] | "
                                     "run:RUN | RUN | stage:STAGE | STAGE | policy:RUN/STAGE[@own|augment|"
                                     "contrastive|both] (fresh samples of a stage's final checkpoint)."),
    label: list[str] = typer.Option([], "--label", help="Column name for each --source, in order."),
    run: str = typer.Option(None, help="Narrow stage sources (stage:STAGE or a bare stage name) to this run."),
    out: Path = typer.Option(Path("bench-report"), help="Directory for report.md, report.json, tasks.csv, PNGs."),
    device: str = typer.Option(None, help="cpu, cuda, cuda:N or auto (default: the recipe's eval.device)."),
    budget_s: float = typer.Option(None, help="Timing seconds per kernel (default: the recipe's bench.budget_s, "
                                   "20 without a recipe; the paper used 20 minutes)."),
    correctness_trials: int = typer.Option(None, help="Random input sets checked per kernel (default: the "
                                           "recipe's bench.correctness_trials, 1000 without one, as the paper)."),
    compare: list[Path] = typer.Option([], "--compare", help="Earlier report.json files to show side by side "
                                       "(repeatable)."),
    top_k: int = typer.Option(1, help="Store sources: re-score the k best stored candidates per task and keep "
                              "the best final score (k>1 costs k times the time; the max of noisy scores is "
                              "biased upward)."),
    stored: bool = typer.Option(False, help="Do not time anything: report the stored evaluations."),
    purpose: str = typer.Option("final", help="With --stored: which evaluations count (final, reward, any)."),
    device_type: str = typer.Option(None, help="With --stored: only evaluations on this device type, e.g. "
                                    "'NVIDIA H100 80GB HBM3'."),
    max_minutes: float = typer.Option(None, help="Stop scoring after this many minutes; the rest is reported "
                                      "as not evaluated."),
    workers: int = typer.Option(1, help="In-process evaluation workers; 0 = rely on `kernelrl worker` processes."),
    recipe: str = typer.Option(None, help="Start the protocol from this recipe's eval settings and bench budget "
                               "(policy sources also sample with its knobs; default: the run's recipe)."),
    policy_k: int = typer.Option(None, help="Policy sources: samples per task (default: the recipe's "
                                 "bench.policy_samples_per_task)."),
    policy_seed: int = typer.Option(None, help="Policy sources: sampling seed (default: recipe seed * 1000 + "
                                    "4321)."),
    policy_as_of: str = typer.Option(None, help="Policy sources' contrastive prompts: the exemplar pool as of this "
                                     "evaluation id, or crl-start (as the run's crl began), the same for every "
                                     "policy source so that they are compared on identical prompts (default: the "
                                     "pool as each stage ended)."),
    title: str = typer.Option(None, help="Report title."),
    task_limit: int = typer.Option(0, help="Use at most this many tasks (0 = all), spread over the levels."),
    tasks: str = typer.Option(None, help="Only these tasks: comma-separated names or keys (e.g. 02_Softmax,09_Swish)."),
    plots: bool = typer.Option(True, help="Write the PNG plots."),
    store_url: str = typer.Option(None, help="Store URL (default: KERNELRL_STORE_URL or the SQLite file)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summaries as JSON."),
    verbose: bool = typer.Option(True, help="Log each kernel's result to stderr."),
) -> None:
    """Score kernels with the final-evaluation protocol and write the report (Markdown, CSV/JSON, PNG)."""
    from kernelrl.config.devices import resolve_device

    if device:
        device = resolve_device(device)  # a device this machine lacks is a usage error, before any work
    ctx.ensure_object(dict)
    ctx.obj.update(suite=suite, levels=levels, out=out, device=device, budget_s=budget_s,
                   correctness_trials=correctness_trials, workers=workers, recipe=recipe, title=title,
                   task_limit=task_limit, tasks=tasks, plots=plots, store_url=store_url, as_json=as_json,
                   verbose=verbose, max_minutes=max_minutes, run=run, purpose=purpose, compare=compare,
                   policy_k=policy_k, policy_seed=policy_seed, policy_as_of=policy_as_of)
    if ctx.invoked_subcommand is not None:
        return
    from kernelrl.reports.runner import BenchOptions, run_bench

    _setup_logging(verbose)
    if top_k < 1:
        raise ConfigError("--top-k: must be >= 1")
    opts = BenchOptions(suite=suite, levels=_levels(levels), sources=list(source), labels=list(label), run=run,
                        out=out, device=device, budget_s=budget_s, correctness_trials=correctness_trials,
                        compare=list(compare), top_k=top_k, stored=stored,
                        stored_purpose=None if purpose == "any" else purpose, device_type=device_type,
                        max_minutes=max_minutes, plots=plots, title=title, task_limit=task_limit,
                        tasks=_names(tasks),
                        local_workers=workers, chunk_size=_chunk(workers), command=_command(),
                        policy_k=policy_k, policy_seed=policy_seed, policy_as_of=policy_as_of,
                        **_recipe_sections(recipe))
    report, paths = run_bench(opts, _store(store_url))
    _print_summary(report, paths, as_json)


def _opts_from_ctx(ctx: typer.Context, **kw):
    from kernelrl.reports.runner import BenchOptions

    o = ctx.obj
    return BenchOptions(suite=o["suite"], levels=_levels(o["levels"]), out=o["out"], device=o["device"],
                        budget_s=o["budget_s"], correctness_trials=o["correctness_trials"],
                        max_minutes=o["max_minutes"], plots=o["plots"], title=o["title"], task_limit=o["task_limit"],
                        tasks=_names(o["tasks"]),
                        local_workers=o["workers"], chunk_size=_chunk(o["workers"]), command=_command(),
                        **_recipe_sections(o["recipe"]), run=o["run"],
                        stored_purpose=None if o["purpose"] == "any" else o["purpose"],
                        compare=list(o["compare"]), policy_k=o["policy_k"], policy_seed=o["policy_seed"],
                        policy_as_of=o["policy_as_of"], **kw)


@bench_app.command("ladder")
def ladder(
    ctx: typer.Context,
    run_name: str = typer.Option(..., "--run", help="The pipeline run whose stages to compare."),
    prompt: str = typer.Option("own", help="Prompt format of the policies' samples: own (each stage's training "
                               "format), augment, contrastive, or both (two rows per rung)."),
    best: bool = typer.Option(True, help="Also the best kernel the run's policies generated and the teachers' best "
                              "(separate, labelled rows)."),
) -> None:
    """The stage ladder of one run (the paper's stage 1 / 1+2 / 1+2+RL): the trained policy after sft, selfsup and
    crl, each sampled fresh from its final checkpoint (``policy:RUN/STAGE``; the recipe's bench
    policy_samples_per_task, or --policy-k), then the best kernels found, labelled apart.

    (Bench options such as --budget-s go before the subcommand: kernelrl bench --budget-s 60 ladder ...)
    """
    from kernelrl.reports.runner import run_bench
    from kernelrl.reports.stage import POLICY_STAGES, RUN_BEST_LABEL, TEACHERS_LABEL

    _setup_logging(ctx.obj["verbose"])
    store = _store(ctx.obj["store_url"])
    rungs = [(lbl, st) for lbl, st in (("stage 1 (sft policy)", "sft"), ("stage 1+2 (selfsup policy)", "selfsup"),
                                        ("stage 1+2+crl (crl policy)", "crl"))
             if (store.stage_record(run_name, st) or {}).get("status") == "done"]
    if not rungs and not best:
        raise KernelRLError(f"run {run_name!r} has no finished sft, selfsup or crl stage")
    sources = [f"policy:{run_name}/{st}@{prompt}" for _, st in rungs]
    labels = [lbl for lbl, _ in rungs]
    if best:
        sources += [f"{run_name}/{'+'.join(POLICY_STAGES)}", f"{run_name}/augment"]
        labels += [RUN_BEST_LABEL, TEACHERS_LABEL]
    opts = _opts_from_ctx(ctx, sources=sources, labels=labels)
    opts.title = opts.title or f"stage ladder of run {run_name}"
    report, paths = run_bench(opts, store)
    _print_summary(report, paths, ctx.obj["as_json"])


@bench_app.command("portability")
def portability(
    ctx: typer.Context,
    from_device: str = typer.Option(..., help="Device type the kernels were found/scored on, as stored "
                                    "(e.g. 'NVIDIA H100 80GB HBM3')."),
    device: str = typer.Option(None, help="Device to re-score on (overrides the bench --device)."),
) -> None:
    """Re-score the best kernels found on one device type on this device; both columns side by side."""
    from kernelrl.reports.runner import run_portability

    _setup_logging(ctx.obj["verbose"])
    opts = _opts_from_ctx(ctx)
    if device:
        from kernelrl.config.devices import resolve_device

        opts.device = resolve_device(device)
    report, paths = run_portability(opts, _store(ctx.obj["store_url"]), from_device)
    _print_summary(report, paths, ctx.obj["as_json"])


@bench_app.command("ablations")
def ablations() -> None:
    """Print the ablation recipes (plain GRPO without exemplars; random / island / bucket sampling)."""
    typer.echo(ABLATION_RECIPES)


@baseline_app.command("vanilla")
def baseline_vanilla(
    ctx: typer.Context,
    llm: str = typer.Option(..., help="OpenAI-compatible 'https://host/v1#model', a local HF model path/id."),
    k: int = typer.Option(5, help="Samples per task; the best (by the training-reward protocol) is final-scored."),
    run_name: str = typer.Option(None, "--run-name", help="Run name for the stored attempts (default: "
                                 "baseline-vanilla-<model>)."),
    temperature: float = typer.Option(0.8, help="Sampling temperature."),
    max_tokens: int = typer.Option(4096, help="Completion budget per sample (kernels are long)."),
) -> None:
    """Prompt a frozen model k times per task with the one-shot prompt, keep the best, final-score it."""
    from kernelrl.reports.baselines import run_vanilla

    _setup_logging(ctx.obj["verbose"])
    report, paths = run_vanilla(_opts_from_ctx(ctx), _store(ctx.obj["store_url"]), llm=llm, k=k,
                                run_name=run_name, temperature=temperature, max_tokens=max_tokens)
    _print_summary(report, paths, ctx.obj["as_json"])


@baseline_app.command("evolve")
def baseline_evolve(
    ctx: typer.Context,
    llm: str = typer.Option(..., help="OpenAI-compatible 'https://host/v1#model', a local HF model path/id."),
    rounds: int = typer.Option(5, help="Search rounds per task."),
    samples: int = typer.Option(4, help="Samples per round."),
    sampler: str = typer.Option("island", help="Exemplar sampler: island (the paper's evolve baseline: islands "
                                "assigned, advanced, migrating), bucket or random."),
    exemplars: int = typer.Option(4, help="Exemplars per prompt, at most (the paper's evolve baseline: 4)."),
    run_name: str = typer.Option(None, "--run-name", help="Run name (default: baseline-evolve-<model>-<sampler>)."),
) -> None:
    """Contrastive search with a frozen model (kernelrl optimize per task), then final-score the best kernels."""
    from kernelrl.reports.baselines import run_evolve

    _setup_logging(ctx.obj["verbose"])
    report, paths = run_evolve(_opts_from_ctx(ctx), _store(ctx.obj["store_url"]), llm=llm, rounds=rounds,
                               samples=samples, sampler=sampler, run_name=run_name, exemplars=exemplars)
    _print_summary(report, paths, ctx.obj["as_json"])


def ablate(
    kernel: Path = typer.Argument(..., help="The kernel file (a ModelNew)."),
    task: str = typer.Option(..., help="Task key, name, or task file."),
    suite: str = typer.Option("builtin", help="Suite to look the task name up in."),
    device: str = typer.Option(None, help="cpu, cuda, cuda:N or auto."),
    budget_s: float = typer.Option(None, help="Timing seconds per variant (default: the recipe's bench.budget_s)."),
    correctness_trials: int = typer.Option(None, help="Correctness inputs per variant."),
    only: str = typer.Option(None, help="Comma-separated techniques to ablate (default: all detected)."),
    out: Path = typer.Option(None, help="Write ablation.json, ablation.md and the variant sources here."),
    recipe: str = typer.Option(None, help="Start the protocol from this recipe's eval settings and bench budget."),
    store_url: str = typer.Option(None, help="Store URL."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Measure a kernel's speedup with each detected technique switched off (where a source transform can)."""
    from kernelrl.reports.ablation import ablation_markdown, run_ablation
    from kernelrl.reports.scoring import Scorer, final_config
    from kernelrl.tasks import get_task

    if not kernel.is_file():
        raise KernelRLError(f"{kernel}: no such kernel file")
    if device:
        from kernelrl.config.devices import resolve_device

        device = resolve_device(device)
    source = kernel.read_text()
    t = get_task(task, suite=suite)
    sections = _recipe_sections(recipe)
    cfg = final_config(sections["eval_base"], bench=sections["bench_base"], device=device, budget_s=budget_s,
                       correctness_trials=correctness_trials)
    with Scorer(_store(store_url), cfg) as scorer:
        result = run_ablation(t, source, scorer, only=_names(only) or None)
    md = ablation_markdown(result)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "ablation.json").write_text(json.dumps(result, indent=1, default=str))
        (out / "ablation.md").write_text(md)
        for tech, src in result["sources"].items():
            (out / f"{kernel.stem}.without_{tech}.py").write_text(src)
    typer.echo(json.dumps({k: v for k, v in result.items() if k != "sources"}, indent=1, default=str)
               if as_json else md)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
    app.command("ablate")(ablate)
