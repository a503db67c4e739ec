"""The contrastive search loop on a frozen model (the paper's training-free "evolve" mode).

    res = optimize_task(task, llm="https://api.deepseek.com/v1#deepseek-chat", rounds=5, samples=4,
                        sampler="bucket", run_name="swish-ds", out="best.py")

Each round: read the pool of verified exemplars from the store (by default the run's own candidates;
``pool="task"``: every verified candidate of the task); with none yet the round uses the one-shot
augmentation prompt (the search starts from the reference alone), otherwise every sample gets its
own contrastive prompt with exemplars drawn by the sampler. Generate, parse, record **every** attempt (parse
failures and failed requests included, with the reason), evaluate the parsed candidates through the
evaluation service (which stores candidates and evaluations), repeat until ``rounds`` rounds exist for the
run or ``budget_s`` seconds have passed.

Resumable: attempt keys are ``{run}:{task}:{round}:{i}``; a second call with the same run name skips the
attempts that exist, generates only the missing ones, re-submits candidates whose evaluation is missing (the
service answers stored ones from the store), and continues with the next round. ``rounds`` is the total for
the run, so re-running a killed command finishes it, and a larger ``rounds`` extends it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kernelrl.config.stages import EvalConfig, SamplerConfig
from kernelrl.errors import ConfigError, KernelRLError
from kernelrl.llm.backends.base import Backend, Generation
from kernelrl.llm.parsing import Parsed, parse_response
from kernelrl.llm.prompts import build_augment_messages, contrastive_prompt, messages_text
from kernelrl.store.sampling import IslandSampler, load_pool, make_sampler
from kernelrl.tasks.loader import Task

log = logging.getLogger(__name__)

STAGE = "optimize"


@dataclass
class SearchConfig:
    rounds: int = 5  # total rounds of the run (a resumed run continues up to this)
    samples: int = 4  # K: samples (prompts) per round
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    max_tokens: int = 4096  # completion budget; kernels are long
    temperature: float = 0.8
    top_p: float = 1.0
    budget_s: float | None = None  # wall-clock budget of this invocation; checked before each round
    max_prompt_tokens: int = 12000  # contrastive prompts are truncated to this (exemplars cut, then dropped)
    seed: int = 0
    eval_timeout_s: float = 6 * 3600  # how long to wait for one round's evaluations
    # Exemplar pool: "run" = only this run's verified candidates (the search starts from the reference alone,
    # and runs compared in one store do not feed each other); "task" = every verified candidate of the task
    # in the store (seeds, other runs, training stages).
    pool: str = "run"
    # Re-evaluate every candidate of the run in this invocation instead of taking its stored evaluation (a resumed
    # run, a source scored before): numbers measured now, on this device and evaluator (`optimize --remeasure`).
    remeasure: bool = False

    def validate(self) -> None:
        if self.rounds < 1:
            raise ConfigError(f"--rounds: must be >= 1, got {self.rounds}")
        if self.samples < 1:
            raise ConfigError(f"--samples: must be >= 1, got {self.samples}")
        if self.max_tokens < 1:
            raise ConfigError(f"--max-tokens: must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"--temperature: must be >= 0, got {self.temperature}")
        if self.budget_s is not None and self.budget_s <= 0:
            raise ConfigError(f"--budget-s: must be > 0, got {self.budget_s}")
        if self.pool not in ("run", "task"):
            raise ConfigError(f"--pool: expected run or task, got {self.pool!r}")


@dataclass
class RoundStats:
    round: int
    kind: str  # augment | contrastive | resumed
    attempts: int = 0  # attempts of this round in the store
    generated: int = 0  # generated in this invocation
    parsed: int = 0
    evaluated: int = 0
    correct: int = 0
    best_round: float = 0.0  # best verified speedup among this round's candidates
    best: float = 0.0  # best so far in the run
    failed_requests: int = 0
    elapsed_s: float = 0.0
    stored: int = 0  # evaluations of this round's candidates taken from the store, not measured in this invocation
    last_error: str = ""  # the last failed request's reason


@dataclass
class SearchResult:
    run_name: str
    task_key: str
    model: str
    rounds_done: int = 0
    attempts: int = 0
    parsed: int = 0
    evaluated: int = 0
    correct: int = 0
    best: dict[str, Any] | None = None  # candidate_id, speedup, evaluation_id, round, source
    out_path: str | None = None
    stopped: str = "rounds"  # rounds | budget
    usage: dict[str, Any] = field(default_factory=dict)
    rounds: list[RoundStats] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["best"]:
            d["best"] = {k: v for k, v in d["best"].items() if k != "source"}
        return d


def attempt_key(run: str, task: Task, rnd: int, i: int) -> str:
    key = f"{run}:{task.key}:{rnd}:{i}"
    if len(key) <= 200:
        return key
    digest = hashlib.sha1(f"{run}:{task.key}".encode()).hexdigest()[:16]
    return f"{run[:120]}:{digest}:{rnd}:{i}"


def _round_index(key: str | None) -> tuple[int, int] | None:
    try:
        _, r, i = str(key).rsplit(":", 2)
        return int(r), int(i)
    except ValueError:
        return None


def _history(store, task_id: int, run: str) -> dict[int, dict[int, int | None]]:
    """round -> {index -> candidate id (None when unparsed)} of this run's attempts on the task."""
    from sqlalchemy import select

    from kernelrl.store.models import AttemptRow

    with store.session() as s:
        rows = s.execute(select(AttemptRow.dedup_key, AttemptRow.candidate_id).where(
            AttemptRow.task_id == task_id, AttemptRow.run_name == run, AttemptRow.stage == STAGE)).all()
    out: dict[int, dict[int, int | None]] = {}
    for key, cid in rows:
        ri = _round_index(key)
        if ri:
            out.setdefault(ri[0], {})[ri[1]] = cid
    return out


def _evaluated(store, candidate_ids: set[int]) -> dict[int, dict[str, Any]]:
    """candidate id -> latest stored evaluation (success, speedup, id) for the given candidates."""
    if not candidate_ids:
        return {}
    from sqlalchemy import func, select

    from kernelrl.store.models import EvaluationRow
    from kernelrl.store.sampling import FATAL_FLAGS as _FATAL

    with store.session() as s:
        latest = (select(EvaluationRow.candidate_id, func.max(EvaluationRow.id).label("eid"))
                  .where(EvaluationRow.candidate_id.in_(candidate_ids))
                  .group_by(EvaluationRow.candidate_id).subquery())
        rows = s.execute(select(EvaluationRow).join(latest, latest.c.eid == EvaluationRow.id)).scalars().all()
        return {r.candidate_id: {"evaluation_id": r.id, "speedup": float(r.speedup or 0.0),
                                 "success": bool(r.executable and r.correct and not (set(r.flags or []) & _FATAL)),
                                 "device_type": r.device_type, "evaluator_version": r.evaluator_version,
                                 "evaluated_at": r.created_at.strftime("%Y-%m-%d %H:%M") if r.created_at else None}
                for r in rows}


def _next_evaluation_id(store) -> int:
    """Evaluations with at least this id are made from now on (the ones below it come from the store)."""
    from sqlalchemy import func, select

    from kernelrl.store.models import EvaluationRow

    with store.session() as s:
        return int(s.scalar(select(func.max(EvaluationRow.id))) or 0) + 1


def _make_sampler(sampler: Any, n_exemplars: int | None, state_path: Path | None):
    if isinstance(sampler, str):
        cfg = SamplerConfig(kind=sampler)
        if n_exemplars is not None:
            cfg.n_exemplars = n_exemplars
        return make_sampler(cfg, state_path=state_path), cfg
    if isinstance(sampler, SamplerConfig):
        return make_sampler(sampler, state_path=state_path), sampler
    return sampler, None  # a sampler object


def model_slug(spec: str) -> str:
    name = spec.rsplit("#", 1)[-1].rstrip("/").rsplit("/", 1)[-1]
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in name)[:60] or "model"


def default_run_name(task: Task, llm: str) -> str:
    return f"optimize-{task.name}-{model_slug(llm)}-{time.strftime('%Y%m%d-%H%M%S')}"


def _sampler_state_path(run: str) -> Path:
    from kernelrl.config.settings import get_settings

    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run)
    return Path(get_settings().home) / "runs" / safe / "island-sampler.json"


def optimize_task(task: Task, *, llm: str | Backend, rounds: int | None = None, samples: int | None = None,
                  sampler: str | SamplerConfig | Any = "bucket", run_name: str | None = None, store=None,
                  eval_config: EvalConfig | None = None, service=None, config: SearchConfig | None = None,
                  out: str | Path | None = None, progress: Callable[[RoundStats, SearchResult], None] | None = None,
                  backend_kwargs: dict[str, Any] | None = None, n_exemplars: int | None = None,
                  sampler_state: str | Path | None = None) -> SearchResult:
    """Run (or resume) the search for one task; see the module docstring. Returns the run's totals and best.

    Long because: the round loop (generate, evaluate, store, update the sampler, checkpoint its state) is one
    resumable sequence whose order matters; its pieces are the helpers above."""
    cfg = replace(config) if config is not None else SearchConfig()  # a copy: the caller's config is not changed
    if rounds is not None:
        cfg.rounds = rounds
    if samples is not None:
        cfg.samples = samples
    cfg.validate()
    if store is None:
        from kernelrl.store import Store

        store = Store()
        store.ensure_ready()
    backend = llm if isinstance(llm, Backend) else None
    spec = backend.name if backend is not None else str(llm)
    run = run_name or default_run_name(task, spec)
    state_path = Path(sampler_state) if sampler_state else _sampler_state_path(run)
    smp, smp_cfg = _make_sampler(sampler, n_exemplars, state_path)
    if smp_cfg is not None:
        cfg.sampler = smp_cfg

    task_id = store.upsert_task(task)
    store.ensure_run(run, STAGE, config={"task": task.key, "llm": spec, "rounds": cfg.rounds, "samples": cfg.samples,
                                         "sampler": asdict(cfg.sampler), "max_tokens": cfg.max_tokens,
                                         "temperature": cfg.temperature})
    result = SearchResult(run_name=run, task_key=task.key, model=spec)
    own_backend = backend is None
    own_service = service is None
    t_start = time.monotonic()
    try:
        if backend is None:
            backend = make_backend_for(spec, backend_kwargs)
        if service is None:
            from kernelrl.evaluation.service import EvalService

            service = EvalService(store, eval_config or EvalConfig(), local_workers=1, use_cache=not cfg.remeasure)
        first_new = _next_evaluation_id(store)
        remeasured: set[int] = set()
        history = _history(store, task_id, run)
        best = 0.0
        generated_rounds = 0
        for rnd in range(1, cfg.rounds + 1):
            done = history.get(rnd, {})
            missing = [i for i in range(cfg.samples) if i not in done]
            # the budget is checked before each round that needs generation (at least one such round runs)
            if missing and generated_rounds and cfg.budget_s is not None and time.monotonic() - t_start > cfg.budget_s:
                result.stopped = "budget"
                break
            t0 = time.monotonic()
            stats = RoundStats(round=rnd, kind="resumed" if not missing else "")
            new_cids: dict[int, int | None] = {}
            island_of: dict[int, int | None] = {}
            if missing:
                new_cids, island_of, stats = _generate_round(task, task_id, run, rnd, missing, cfg, backend, smp,
                                                             store, stats)
                generated_rounds += 1
            cids = {**done, **new_cids}
            round_cands = {c for c in cids.values() if c is not None}
            _evaluate(store, service, task, run, spec, round_cands, cfg, remeasured)
            if isinstance(smp, IslandSampler):
                for c, isl in island_of.items():
                    if c is not None and isl is not None:
                        smp.assign(c, isl, group=task_id)
                if missing:
                    smp.advance(_pool(store, task_id, run, cfg)[0], group=task_id)
            ev = _evaluated(store, round_cands)
            stats.stored = sum(1 for c in round_cands if c in ev and ev[c]["evaluation_id"] < first_new)
            stats.attempts = len(cids)
            stats.parsed = sum(1 for c in cids.values() if c is not None)
            stats.evaluated = sum(1 for c in cids.values() if c is not None and c in ev)
            stats.correct = sum(1 for c in cids.values() if c is not None and ev.get(c, {}).get("success"))
            stats.best_round = max((ev[c]["speedup"] for c in round_cands if ev.get(c, {}).get("success")), default=0.0)
            best = max(best, stats.best_round)
            stats.best = best
            stats.elapsed_s = time.monotonic() - t0
            history[rnd] = cids
            result.rounds.append(stats)
            result.rounds_done = rnd
            if progress:
                progress(stats, result)
        _totals(store, task_id, run, result, history)
        if result.best:
            result.best["from_store"] = result.best["evaluation_id"] < first_new
        if backend is not None:
            result.usage = backend.usage.to_dict()
        if out is not None and result.best:
            result.out_path = str(write_best(out, task, result))
        return result
    finally:
        if own_service and service is not None:
            service.close()
        if own_backend and backend is not None:
            backend.close()


def make_backend_for(spec: str, backend_kwargs: dict[str, Any] | None = None) -> Backend:
    from kernelrl.llm.backends import make_backend

    return make_backend(spec, **(backend_kwargs or {}))


def _pool(store, task_id: int, run: str, cfg: SearchConfig):
    return load_pool(store, task_id, run_name=run if cfg.pool == "run" else None)


def _generate_round(task, task_id, run, rnd, missing, cfg: SearchConfig, backend: Backend, smp, store,
                    stats: RoundStats):
    pool, snapshot = _pool(store, task_id, run, cfg)
    use_exemplars = bool(pool) and getattr(smp, "n", 0) > 0
    prompts: list[list[dict]] = []
    metas: list[dict[str, Any]] = []
    if not use_exemplars:
        stats.kind = "augment"
        msgs = build_augment_messages(task)
        gens_flat = backend.generate([msgs], n=len(missing), max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                                     top_p=cfg.top_p, seed=cfg.seed + 1000 * rnd)[0]
        prompts = [msgs] * len(missing)
        metas = [{"exemplar_ids": [], "island": None} for _ in missing]
    else:
        stats.kind = "contrastive"
        for i in missing:
            rng = random.Random(f"{cfg.seed}:{run}:{task.key}:{rnd}:{i}")
            ex = smp.sample(pool, rng, group=task_id)
            island = smp.last_island(task_id) if isinstance(smp, IslandSampler) else None
            p = contrastive_prompt(task, ex, backend.count_tokens, cfg.max_prompt_tokens)
            if p.over_budget:
                log.warning("round %d sample %d: the prompt needs %d tokens, over the %d budget even without "
                            "exemplars", rnd, i, p.tokens, cfg.max_prompt_tokens)
            prompts.append(p.messages)
            metas.append({"exemplar_ids": [e.candidate_id for e in p.shown], "island": island,
                          "cut_lines": p.cut_lines, "dropped": [e.candidate_id for e in p.dropped]})
        rows = backend.generate(prompts, n=1, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                                top_p=cfg.top_p, seed=cfg.seed + 1000 * rnd)
        gens_flat = [row[0] if row else Generation("", finish_reason="error", error="no generation returned")
                     for row in rows]
    # a backend that returned fewer generations than asked: the rest are recorded as failures
    gens_flat = list(gens_flat) + [Generation("", finish_reason="error", error="no generation returned")] * (
        len(missing) - len(gens_flat))
    new_cids: dict[int, int | None] = {}
    island_of: dict[int, int | None] = {}
    for i, msgs, meta, gen in zip(missing, prompts, metas, gens_flat):
        parsed = parse_response(gen.text) if gen.ok else Parsed(error=f"generation failed: {gen.error}")
        prompt_text = messages_text(msgs)
        cid = None
        if parsed.ok:
            cid = store.add_candidate(task_id, parsed.code, origin_stage=STAGE, origin_model=backend.name, run_name=run,
                                      prompt=prompt_text, analysis=parsed.analysis, design=parsed.design,
                                      meta={"round": rnd, "index": i, "snapshot": snapshot,
                                            "exemplar_ids": meta["exemplar_ids"], "warnings": parsed.warnings,
                                            "finish_reason": gen.finish_reason})
        error = parsed.error
        if error and gen.ok and gen.finish_reason == "length":
            error += " (the completion hit max_tokens)"
        store.add_attempt(task_id, stage=STAGE, run_name=run, model=backend.name, prompt=prompt_text,
                          response=gen.text, parse_error=error, candidate_id=cid,
                          prompt_tokens=gen.prompt_tokens or None, completion_tokens=gen.completion_tokens or None,
                          exemplar_ids=meta["exemplar_ids"], snapshot=snapshot,
                          dedup_key=attempt_key(run, task, rnd, i))
        new_cids[i] = cid
        island_of[cid] = meta.get("island") if cid is not None else None
        stats.generated += 1
        stats.failed_requests += 0 if gen.ok else 1
        stats.last_error = stats.last_error if gen.ok else str(gen.error or "")[:300]
    return new_cids, island_of, stats


def _evaluate(store, service, task: Task, run: str, spec: str, cids: set[int], cfg: SearchConfig,
              remeasured: set[int] | None = None) -> None:
    """Evaluate the round's candidates that have no evaluation on this device type by this evaluator version
    (with ``cfg.remeasure``: each candidate once per invocation, ``remeasured`` keeps count)."""
    if not cids:
        return
    from kernelrl.evaluation.service import EvalRequest
    from kernelrl.store.models import CandidateRow

    # already evaluated on this device type by this evaluator version (a resumed round): nothing to submit
    from kernelrl.evaluation.api import EVALUATOR_VERSION

    have = _evaluated(store, cids)
    device_type = getattr(service, "device_type", None)
    if cfg.remeasure and remeasured is not None:
        cids = cids - remeasured
        remeasured.update(cids)
    else:
        cids = {c for c in cids if not (c in have and have[c]["device_type"] == device_type
                                        and have[c]["evaluator_version"] == EVALUATOR_VERSION)}
    if not cids:
        return
    with store.session() as s:
        sources = {c: s.get(CandidateRow, c).source for c in cids}
    reqs = [EvalRequest(task, sources[c], candidate_id=c, origin_stage=STAGE, origin_model=spec, run_name=run)
            for c in sorted(cids)]
    try:
        service.evaluate_many(reqs, timeout_s=cfg.eval_timeout_s)
    except TimeoutError:
        raise KernelRLError(f"evaluations still pending after {cfg.eval_timeout_s:g}s (are workers running for "
                            f"this device?); everything generated is stored: resume with --run {run}") from None


def _totals(store, task_id: int, run: str, result: SearchResult, history: dict[int, dict[int, int | None]]) -> None:
    history = _history(store, task_id, run)  # everything the run has, earlier invocations included
    all_c = {c for r in history.values() for c in r.values() if c is not None}
    ev = _evaluated(store, all_c)
    result.attempts = sum(len(r) for r in history.values())
    result.parsed = sum(1 for r in history.values() for c in r.values() if c is not None)
    result.evaluated = sum(1 for r in history.values() for c in r.values() if c is not None and c in ev)
    result.correct = sum(1 for r in history.values() for c in r.values()
                         if c is not None and ev.get(c, {}).get("success"))
    wins = [(ev[c]["speedup"], -c, c) for c in all_c if ev.get(c, {}).get("success")]
    if wins:
        _, _, cid = max(wins)
        from kernelrl.store.models import CandidateRow

        with store.session() as s:
            row = s.get(CandidateRow, cid)
            source = row.source
        rnd = next((r for r, m in sorted(history.items()) if cid in m.values()), None)
        result.best = {"candidate_id": cid, "speedup": ev[cid]["speedup"], "evaluation_id": ev[cid]["evaluation_id"],
                       "device_type": ev[cid]["device_type"], "evaluator_version": ev[cid]["evaluator_version"],
                       "evaluated_at": ev[cid]["evaluated_at"], "round": rnd, "source": source}


def write_best(out: str | Path, task: Task, result: SearchResult) -> Path:
    """The best verified ModelNew, with its speedup and provenance in a header comment (atomic write)."""
    b = result.best or {}
    sp = float(b.get("speedup") or 0.0)
    verdict = "faster than" if sp > 1.0 else "not faster than" if sp == 1.0 else "slower than"
    header = [
        f"# kernelrl optimize: best verified ModelNew for {task.key}",
        f"# verified speedup: {sp:.2f}x ({verdict} the reference) on {b.get('device_type')}, "
        f"evaluator {b.get('evaluator_version')}, evaluation {b.get('evaluation_id')}",
        f"# run: {result.run_name}, round {b.get('round')}, candidate {b.get('candidate_id')}, model {result.model}",
    ]
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(header) + "\n" + str(b.get("source", "")).rstrip("\n") + "\n")
    os.replace(tmp, path)
    return path


def summary_json(result: SearchResult) -> str:
    return json.dumps(result.to_dict(), indent=1, default=str)
