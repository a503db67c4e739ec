"""Baselines of the paper's table: vanilla (best of k one-shot prompts) and evolve (contrastive search with a
frozen model), both final-scored like any other source.

- **vanilla**: for every task, ask the model k times (k=5 in the paper) with the one-shot augmentation prompt;
  every response is stored as an attempt (parsed or not) and every parsed kernel as a candidate of the run
  ``baseline-vanilla-<model>`` (origin_stage ``baseline-vanilla``); the candidates are scored with the
  training-reward protocol to pick the best per task, which is then re-scored with the final protocol
  (``run_bench`` over ``run:<run>``). Resumable: tasks that already have k attempts in the run are not asked again.
- **evolve**: ``kernelrl.search`` (the ``kernelrl optimize`` loop) per task with a frozen model, recorded under the
  run ``baseline-evolve-<model>-<sampler>``; then the same final scoring. The paper's evolve baseline: islands
  (``sampler="island"``, assigned, advanced and migrating every ``migration_interval`` rounds) and up to 4
  exemplars per prompt (``exemplars=4``); the pool is the run's own verified candidates (it starts from the
  reference alone).

Both reach the model only through ``kernelrl.llm`` (``make_backend``, ``augmentation_prompt``, ``parse_response``)
and ``kernelrl.search.optimize_task``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kernelrl.config.stages import EvalConfig
from kernelrl.errors import KernelRLError
from kernelrl.reports.runner import BenchOptions, load_tasks, run_bench
from kernelrl.reports.scoring import Scorer
from kernelrl.reports.sources import Pick
from kernelrl.search.loop import model_slug  # one slug rule for run names
from kernelrl.tasks.loader import Task

log = logging.getLogger(__name__)

# (task, n) -> n raw completions; (text) -> (code or None, parse error or None)
Generate = Callable[[Task, int], list[str]]
Parse = Callable[[str], tuple[str | None, str | None]]


def _llm(spec: str, temperature: float, max_tokens: int) -> tuple[Generate, Parse, Any]:
    """Adapter to the LLM layer: (generate, parse, backend) for a model spec."""
    try:
        from kernelrl.llm import augmentation_prompt, make_backend, parse_response
    except ImportError as e:
        raise KernelRLError(f"baseline vanilla needs the LLM layer (kernelrl.llm): {e}") from None
    backend = make_backend(spec)

    def generate(task: Task, n: int) -> list[str]:
        gens = backend.generate([augmentation_prompt(task)], n=n, max_tokens=max_tokens, temperature=temperature)[0]
        # a request that failed after retries is kept as an attempt that says so (it is never dropped)
        return [g.text if g.error is None else f"[generation failed: {g.error}]" for g in gens]

    def parse(text: str) -> tuple[str | None, str | None]:
        p = parse_response(text)
        return (p.code, None) if p.ok else (None, p.error or "no code")

    return generate, parse, backend


def collect_vanilla(tasks: list[Task], store, generate: Generate, parse: Parse, *, k: int, run_name: str,
                    model: str, reward_cfg: EvalConfig) -> dict[str, Any]:
    """Ask k times per task, store every attempt and candidate, score the candidates with the reward protocol."""
    from sqlalchemy import func, select

    from kernelrl.store.models import AttemptRow

    stats = {"tasks": 0, "attempts": 0, "parsed": 0, "skipped_tasks": 0}
    picks: list[Pick] = []
    for t in tasks:
        tid = store.upsert_task(t)
        with store.session() as s:
            have = s.scalar(select(func.count()).select_from(AttemptRow).where(
                AttemptRow.task_id == tid, AttemptRow.run_name == run_name, AttemptRow.stage == "baseline-vanilla"))
        if have >= k:
            stats["skipped_tasks"] += 1
            continue
        stats["tasks"] += 1
        for i, text in enumerate(generate(t, k - have), start=have):
            code, err = parse(text)
            cid = None
            if code:
                cid = store.add_candidate(tid, code, origin_stage="baseline-vanilla", origin_model=model,
                                          run_name=run_name)
                picks.append(Pick(t, code, variant=f"sample {i}", origin="baseline-vanilla", candidate_id=cid))
                stats["parsed"] += 1
            store.add_attempt(tid, stage="baseline-vanilla", run_name=run_name, model=model, response=text,
                              parse_error=err if not code else None, candidate_id=cid,
                              dedup_key=f"{run_name}:{t.key}:{i}")
            stats["attempts"] += 1
    with Scorer(store, reward_cfg, purpose="reward", run_name=run_name, reuse=True) as scorer:
        scorer.score(picks)
    return stats


def run_vanilla(opts: BenchOptions, store, *, llm: str, k: int = 5, run_name: str | None = None,
                temperature: float = 0.8, max_tokens: int = 4096, generate: Generate | None = None,
                parse: Parse | None = None):
    if k < 1:
        raise KernelRLError("--k: must be >= 1")
    run_name = run_name or f"baseline-vanilla-{model_slug(llm)}"
    backend = None
    if generate is None or parse is None:
        generate, parse, backend = _llm(llm, temperature, max_tokens)
    try:
        return _vanilla(opts, store, llm, k, run_name, temperature, generate, parse)
    finally:
        if backend is not None:
            backend.close()


def _vanilla(opts, store, llm, k, run_name, temperature, generate, parse):
    tasks = load_tasks(opts.suite, opts.levels, opts.task_limit, opts.tasks)
    store.ensure_run(run_name, "baseline-vanilla", config={"llm": llm, "k": k, "temperature": temperature})
    reward_cfg = opts.eval_base or EvalConfig()
    if opts.device:
        reward_cfg = replace(reward_cfg, device=opts.device)
    stats = collect_vanilla(tasks, store, generate, parse, k=k, run_name=run_name, model=llm, reward_cfg=reward_cfg)
    log.info("vanilla baseline: %s", stats)
    opts = replace(opts, sources=[f"run:{run_name}"], labels=[f"vanilla best of {k} ({model_slug(llm)})"],
                   title=opts.title or f"vanilla baseline: {model_slug(llm)}, best of {k}")
    return run_bench(opts, store)


def run_evolve(opts: BenchOptions, store, *, llm: str, rounds: int = 5, samples: int = 4, sampler: str = "island",
               run_name: str | None = None, exemplars: int = 4, backend_kwargs: dict[str, Any] | None = None):
    """Contrastive search with a frozen model per task (``kernelrl.search``), then final scoring. Defaults are the
    paper's evolve baseline: island sampling, up to 4 exemplars per prompt."""
    try:
        from kernelrl.evaluation.service import EvalService
        from kernelrl.llm import make_backend
        from kernelrl.search import optimize_task
    except ImportError as e:
        raise KernelRLError(f"baseline evolve needs the search loop (kernelrl.search): {e}") from None
    from dataclasses import asdict

    from kernelrl.config.stages import SamplerConfig

    if exemplars < 1:
        raise KernelRLError("--exemplars: must be >= 1")
    smp = SamplerConfig(kind=sampler, n_exemplars=exemplars)
    run_name = run_name or f"baseline-evolve-{model_slug(llm)}-{sampler}"
    tasks = load_tasks(opts.suite, opts.levels, opts.task_limit, opts.tasks)
    store.ensure_run(run_name, "baseline-evolve", config={"llm": llm, "rounds": rounds, "samples": samples,
                                                          "sampler": asdict(smp)})
    reward_cfg = opts.eval_base or EvalConfig()
    if opts.device:
        reward_cfg = replace(reward_cfg, device=opts.device)
    backend = make_backend(llm, **(backend_kwargs or {}))
    try:
        with EvalService(store, reward_cfg, local_workers=max(1, opts.local_workers)) as service:
            for t in tasks:  # one run for every task: the report reads it back as run:<run_name>
                try:
                    optimize_task(t, llm=backend, rounds=rounds, samples=samples, sampler=smp, run_name=run_name,
                                  store=store, service=service, eval_config=reward_cfg)
                except KernelRLError:
                    raise
                except Exception as e:  # one task's failure must not end the baseline
                    log.error("evolve on %s failed: %s", t.key, e)
    finally:
        backend.close()
    label = f"evolve ({model_slug(llm)}, {sampler}, up to {exemplars} exemplars)"
    opts = replace(opts, sources=[f"run:{run_name}"], labels=[label],
                   title=opts.title or f"evolve baseline: {model_slug(llm)}, {rounds} rounds x {samples}")
    return run_bench(opts, store)
