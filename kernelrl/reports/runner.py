"""Run a benchmark: resolve sources, score their kernels with the final protocol, build and write the report.

Used by ``kernelrl bench`` (CLI), ``steps.bench`` (the pipeline's last stage) and ``bench/seed_corpus_report.py``.

    opts = BenchOptions(sources=["seeds"], levels=[1], out=Path("out"), budget_s=1.0, correctness_trials=5)
    report, paths = run_bench(opts, store)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelrl.config.stages import BenchConfig, EvalConfig
from kernelrl.errors import KernelRLError
from kernelrl.reports import artifacts
from kernelrl.reports.progress import BenchProgress, stored_note
from kernelrl.reports.report import Report, SourceResult, make_row
from kernelrl.reports.scoring import Scorer, final_config, protocol_dict
from kernelrl.reports.sources import Pick, ResolvedSource, best_from_store, resolve
from kernelrl.tasks.loader import Task, source_hash

log = logging.getLogger(__name__)


def _default_local_workers() -> int:
    from kernelrl.config.gpus import local_eval_workers

    return local_eval_workers(None)


@dataclass
class BenchOptions:
    suite: str = "builtin"
    levels: list[int] | None = None
    sources: list[str] = field(default_factory=lambda: ["seeds"])
    labels: list[str] = field(default_factory=list)  # one per source, in order; default: derived from the spec
    run: str | None = None  # narrows stage sources to one run
    out: Path = Path("bench-report")
    device: str | None = None  # None: the recipe's / EvalConfig default
    budget_s: float | None = None  # None: bench_base.budget_s (the recipe's bench section, else BenchConfig's)
    correctness_trials: int | None = None  # None: bench_base.correctness_trials
    compare: list[Path] = field(default_factory=list)  # earlier report.json files shown side by side
    top_k: int = 1
    stored: bool = False  # report stored evaluations instead of timing again
    stored_purpose: str | None = "final"  # with stored: which evaluations count (None: any)
    device_type: str | None = None  # with stored: only evaluations on this device type
    max_minutes: float | None = None  # wall-clock bound on scoring; kernels not reached are "not evaluated"
    plots: bool = True
    title: str | None = None
    task_limit: int = 0
    tasks: list[str] = field(default_factory=list)  # only these tasks (names or keys); empty: all selected
    # in-process evaluation workers: KERNELRL_EVAL_LOCAL_WORKERS (default 1); a GPU recipe's step sets 0, so the
    # bench stage's jobs go to the evaluator GPUs' workers (kernelrl.config.gpus)
    local_workers: int = field(default_factory=_default_local_workers)
    chunk_size: int = 1
    command: str = ""
    eval_base: EvalConfig | None = None  # the recipe's eval settings (device, caps) the protocol starts from
    bench_base: BenchConfig | None = None  # the recipe's bench section: the final protocol's budget and trials
    run_name: str | None = None  # run name recorded on newly stored candidates (default: none)
    artifacts: bool = True
    # The bench step: rank a run's candidates by their training-time (reward) scores, never by this stage's own
    # earlier final scores, and reuse final evaluations stored under the identical protocol, so a re-run (after
    # a kill) scores the same kernels and continues instead of timing each again (a second final row per kernel).
    resume: bool = False
    reuse_scores: bool = True  # with resume: False measures every kernel again (a forced bench stage, issue 33)
    # Policy sources (``policy:RUN/STAGE[@FORMAT]``, kernelrl.reports.policy): the recipe whose knobs they sample
    # with (None: the run's recipe by name), samples per task (None: recipe.bench.policy_samples_per_task) and the
    # seed (None: recipe.seed * 1000 + 4321).
    recipe: Any = None
    policy_k: int | None = None
    policy_seed: int | None = None
    # Contrastive prompts of policy sources: None = the pool as each stage ended; an evaluation id or "crl-start"
    # = one pool for every policy source, so that policies are compared on identical prompts (issue 30 item 7)
    policy_as_of: str | int | None = None


def load_tasks(suite: str, levels: list[int] | None, task_limit: int = 0, only: list[str] | None = None) -> list[Task]:
    """The tasks a recipe with this suite/levels/task_limit trains on (the same selection as the training
    stages: ``kernelrl.training.common.recipe_tasks``), optionally narrowed to ``only`` (names or keys)."""
    from kernelrl.config.recipes import Recipe
    from kernelrl.training.common import recipe_tasks

    tasks = recipe_tasks(Recipe(suite=suite, levels=levels, task_limit=0 if only else task_limit))
    if only:
        from kernelrl.reports.sources import TaskIndex

        index = TaskIndex(tasks)
        found = [index.find(ref) for ref in only]
        missing = [ref for ref, t in zip(only, found) if t is None]
        if missing:
            raise KernelRLError(f"--tasks: {', '.join(missing)} not in suite {suite!r} at levels {levels or 'all'}")
        tasks = [t for t in tasks if t in found]
        if task_limit:
            tasks = tasks[:task_limit]
    return tasks


def device_kind(device: str) -> str:
    if device.startswith("cuda"):
        return "cuda"
    if device == "cpu":
        return "cpu"
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def stored_result(store, task: Task, code: str, *, purpose: str | None, device_type: str | None) -> dict | None:
    """The latest stored evaluation of this exact code for this task (None if it was never scored)."""
    from sqlalchemy import select

    from kernelrl.store.models import CandidateRow, EvaluationRow, TaskRow

    with store.session() as s:
        q = (select(EvaluationRow).join(CandidateRow, CandidateRow.id == EvaluationRow.candidate_id)
             .join(TaskRow, TaskRow.id == CandidateRow.task_id)
             .where(TaskRow.key == task.key, CandidateRow.source_hash == source_hash(code)))
        if purpose:
            q = q.where(EvaluationRow.purpose == purpose)
        if device_type:
            q = q.where(EvaluationRow.device_type == device_type)
        ev = s.scalar(q.order_by(EvaluationRow.id.desc()).limit(1))
        if ev is None:
            return None
        return dict(ev.result or {}, executable=ev.executable, correct=ev.correct, speedup=ev.speedup,
                    flags=ev.flags, error=ev.error, device_type=ev.device_type,
                    evaluator_version=ev.evaluator_version, candidate_id=ev.candidate_id, evaluation_id=ev.id)


def _rank(row: dict[str, Any]) -> tuple:
    return (bool(row["success"]), float(row["speedup"]))


def build_source(resolved: ResolvedSource, tasks: list[Task], results: list[dict | None],
                 protocol: dict[str, Any], *, not_evaluated: str = "not evaluated") -> SourceResult:
    """Rows of one source from its picks' results: best per task (or every kernel), missing tasks as failures."""
    rows_by_task: dict[str, list[dict[str, Any]]] = {}
    for pick, res in zip(resolved.picks, results):
        err = None
        if res is None:
            err = not_evaluated if pick.source else (pick.note or "no candidate")
        row = make_row(source=resolved.label, task_key=pick.task.key, task=pick.task.name, level=pick.task.level,
                       result=res, code=pick.source, variant=pick.variant, origin=pick.origin,
                       candidate_id=pick.candidate_id, error=err)
        rows_by_task.setdefault(pick.task.key, []).append(row)
    rows: list[dict[str, Any]] = []
    for t in tasks:
        cand = rows_by_task.get(t.key, [])
        if resolved.reduce == "none":
            rows.extend(cand)
            continue
        if cand:
            rows.append(max(cand, key=_rank))  # max keeps the first of equals: the earliest-ranked pick
        else:
            rows.append(make_row(source=resolved.label, task_key=t.key, task=t.name, level=t.level, result=None,
                                 code=None, error=resolved.missing))
    not_eval = sum(1 for r in rows if not r["evaluated"] and r["error"] == not_evaluated)
    notes = list(resolved.notes)
    if not_eval:
        notes.append(f"{not_eval} kernels {not_evaluated}; they count as unsuccessful")
    return SourceResult(resolved.label, resolved.spec, rows, resolved.unit, notes, protocol,
                        provenance=dict(resolved.provenance))


def _log_progress(done: int, total: int, pick: Pick, res: dict | None) -> None:
    ok = res and res.get("executable") and res.get("correct")
    log.info("[%d/%d] %s %s: %s", done, total, pick.task.name, pick.variant,
             f"{float(res.get('speedup') or 0):.2f}x" if ok else (res or {}).get("error") or "unsuccessful")


def resolve_sources(opts: BenchOptions, tasks: list[Task], store, cfg: EvalConfig, purpose: str | None
                    ) -> list[ResolvedSource]:
    """Every ``--source`` resolved, in order; a policy source is sampled now (one source per prompt format)."""
    from kernelrl.reports.policy import is_policy_spec, resolve_policy

    kind = device_kind(cfg.device)
    out: list[ResolvedSource] = []
    for i, spec in enumerate(opts.sources):
        label = opts.labels[i] if i < len(opts.labels) else None
        if is_policy_spec(spec):
            if opts.stored:
                raise KernelRLError(f"--source {spec}: a policy source is sampled now; --stored does not apply")
            from kernelrl.training.policy import device_scope

            dtype, dkind = device_scope(cfg)  # contrastive prompts: the pool measured on the scoring device type
            out += resolve_policy(spec, tasks, store, recipe=opts.recipe, k=opts.policy_k, seed=opts.policy_seed,
                                  device_type=dtype, device_kind=dkind, label=label, as_of=opts.policy_as_of)
            continue
        out.append(resolve(spec, tasks, store=store, run=opts.run, top_k=opts.top_k, device_kind=kind, label=label,
                           purpose=purpose, device_type=opts.device_type if opts.stored else None))
    return out


def scoring_order(resolved: list[ResolvedSource], tasks: list[Task]) -> list[tuple[tuple, int, int]]:
    """The order picks are scored in, as ``(sort key, source index, pick index)``: rank 0 first, then task by task
    with every source of a task before the next task. A run cut short by --max-minutes then leaves paired rows
    (each task it reached has every source's score), not one source's rows over all tasks and none of the next."""
    task_order = {t.key: i for i, t in enumerate(tasks)}
    return sorted(((p.rank, task_order.get(p.task.key, 0), si), si, pi)
                  for si, rs in enumerate(resolved) for pi, p in enumerate(rs.picks))


def run_bench(opts: BenchOptions, store, *, progress: Callable | None = None) -> tuple[Report, dict[str, Path]]:
    tasks = load_tasks(opts.suite, opts.levels, opts.task_limit, opts.tasks)
    if not tasks:
        raise KernelRLError(f"suite {opts.suite!r} has no tasks at levels {opts.levels}")
    if opts.labels and len(opts.labels) > len(opts.sources):
        raise KernelRLError(f"{len(opts.labels)} labels for {len(opts.sources)} sources")
    cfg = final_config(opts.eval_base, bench=opts.bench_base, device=opts.device, budget_s=opts.budget_s,
                       correctness_trials=opts.correctness_trials)
    purpose = opts.stored_purpose if opts.stored else ("reward" if opts.resume else None)
    resolved = resolve_sources(opts, tasks, store, cfg, purpose)
    sources: list[SourceResult] = []
    extra_notes: list[str] = []  # for the report: which numbers were not measured now
    if opts.stored:
        for rs in resolved:
            # store sources were selected by their stored score under the same filter; files/seeds by source hash
            results = [p.stored if p.candidate_id is not None else
                       stored_result(store, p.task, p.source, purpose=purpose, device_type=opts.device_type)
                       for p in rs.picks]
            proto = {"purpose": f"stored {purpose or 'any'}", "device": opts.device_type or "any"}
            sources.append(build_source(rs, tasks, results, proto, not_evaluated=f"no stored {purpose or ''} score"))
    else:
        flat = scoring_order(resolved, tasks)
        deadline = time.time() + 60 * opts.max_minutes if opts.max_minutes else None
        picks = [resolved[si].picks[pi] for _, si, pi in flat]
        # an estimate first, then each kernel with the time left; the report so far is rewritten as kernels finish
        tracker = BenchProgress(len({(p.task.key, source_hash(p.source)) for p in picks if p.source}), cfg,
                                log_fn=progress or _log_progress, max_minutes=opts.max_minutes,
                                write_partial=lambda done: _write_partial(opts, resolved, tasks, cfg, done),
                                local_workers=opts.local_workers)
        tracker.announce()
        with Scorer(store, cfg, local_workers=opts.local_workers, run_name=opts.run_name,
                    reuse="same-settings" if opts.resume and opts.reuse_scores else False) as scorer:
            results = scorer.score(picks, deadline=deadline, chunk_size=opts.chunk_size, progress=tracker)
        note = stored_note(results)  # numbers not measured now are labelled (issue 33)
        if note:
            log.warning("%s", note)
            extra_notes.append(note)
        per_source: list[list[dict | None]] = [[None] * len(rs.picks) for rs in resolved]
        for (_, si, pi), res in zip(flat, results):
            per_source[si][pi] = res
        proto = protocol_dict(cfg)
        for rs, res in zip(resolved, per_source):
            sources.append(build_source(rs, tasks, res, proto,
                                        not_evaluated="not evaluated: the --max-minutes budget was spent"))
    report = Report(title=opts.title or "kernelrl benchmark: " + ", ".join(s.label for s in sources),
                    sources=sources, suite=opts.suite, levels=sorted({t.level for t in tasks}), command=opts.command)
    report.notes.extend(extra_notes)
    for path in opts.compare:
        report.add_compared(Report.load(path), str(path))
    paths = report.write(opts.out, plots=opts.plots)
    if opts.artifacts:
        try:
            artifacts.publish(report, paths["markdown"].read_text())
        except Exception as e:  # an artifact is a convenience: never lose the report over it
            log.warning("could not publish Prefect artifacts: %s", e)
    return report, paths


def _write_partial(opts: BenchOptions, resolved: list[ResolvedSource], tasks: list[Task], cfg: EvalConfig,
                   done: dict[int, Any]) -> None:
    """The report so far, every file but the plots (``done``: results by pick id): a killed bench leaves a valid
    report of what it scored; the finished run overwrites it."""
    proto = protocol_dict(cfg)
    sources = [build_source(rs, tasks, [done.get(id(p)) for p in rs.picks], proto,
                            not_evaluated="not evaluated yet (partial report)") for rs in resolved]
    title = opts.title or "kernelrl benchmark: " + ", ".join(s.label for s in sources)
    Report(title=f"{title} (partial: {len(done)} kernels scored so far)", sources=sources, suite=opts.suite,
           levels=sorted({t.level for t in tasks}), command=opts.command).write(opts.out, plots=False)


def run_portability(opts: BenchOptions, store, from_device: str) -> tuple[Report, dict[str, Path]]:
    """Kernels scored on ``from_device`` (stored), re-scored on this device with the final protocol."""
    tasks = load_tasks(opts.suite, opts.levels, opts.task_limit, opts.tasks)
    by_key = {t.key: t for t in tasks}
    found = best_from_store(store, list(by_key), run=opts.run, purpose=opts.stored_purpose,
                            device_type=from_device, top_k=1)
    if not found:
        raise KernelRLError(f"no successful {opts.stored_purpose or ''} evaluation on device type {from_device!r} "
                            f"in the store for these tasks (see `kernelrl store stats`)")
    picks = [Pick(by_key[k], c[0]["source"], variant=f"candidate {c[0]['candidate_id']}",
                  origin=c[0]["origin_stage"], candidate_id=c[0]["candidate_id"]) for k, c in found.items()]
    stored = [found[p.task.key][0]["evaluation"] for p in picks]
    a = ResolvedSource(f"{from_device} (stored)", f"device_type={from_device}", picks,
                       notes=[f"stored {opts.stored_purpose or 'any'} evaluations"])
    cfg = final_config(opts.eval_base, bench=opts.bench_base, device=opts.device, budget_s=opts.budget_s,
                       correctness_trials=opts.correctness_trials)
    deadline = time.time() + 60 * opts.max_minutes if opts.max_minutes else None
    with Scorer(store, cfg, local_workers=opts.local_workers, run_name=opts.run_name) as scorer:
        results = scorer.score(picks, deadline=deadline, progress=_log_progress)
    device_types = sorted({str(r.get("device_type")) for r in results if r and r.get("device_type")})
    here = ", ".join(device_types) or cfg.device
    b = ResolvedSource(f"{here} (re-scored)", f"device={cfg.device}", picks)
    src_a = build_source(a, tasks, stored, {"purpose": f"stored {opts.stored_purpose or 'any'}", "device": from_device})
    src_b = build_source(b, tasks, results, protocol_dict(cfg))
    notes = []
    if from_device in device_types:
        notes.append(f"the re-scoring device is the same type as {from_device!r}: this is a repeatability check")
    report = Report(title=opts.title or f"portability: {from_device} -> {here}", sources=[src_a, src_b],
                    suite=opts.suite, levels=sorted({t.level for t in tasks}), command=opts.command,
                    kind="portability", notes=notes)
    paths = report.write(opts.out, plots=opts.plots)
    if opts.artifacts:
        try:
            artifacts.publish(report, paths["markdown"].read_text())
        except Exception as e:
            log.warning("could not publish Prefect artifacts: %s", e)
    return report, paths
