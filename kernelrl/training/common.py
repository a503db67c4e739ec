"""What the training stages share: a recipe's tasks, recording + evaluating generations, summary statistics,
sampling a policy the same way in every stage, and small file helpers.

    tasks = recipe_tasks(recipe, settings)
    results = evaluate_samples(store, svc, [Sample(task, generation, prompt_msgs)], stage="selfsup", run="r1",
                               model=model_dir, key_prefix="r1:selfsup:0")
    summarize(results)    # success_rate, mean_speedup, speedup quantiles
    policy_eval(model_dir, tasks, store, svc, k=4, max_tokens=512, temperature=0.5, stage="sft", run="r1")

Every generation is stored as an attempt (parsed or not, with its analysis/design/code split by the parser);
the dedup key of an attempt is ``<key_prefix>:<index>:<sha of the response>``, so a step that is re-run after a
crash writes an identical generation once and a genuinely new one as a new row. Candidates are idempotent on
(task, source hash) and the evaluation service answers an already evaluated source from the store.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelrl.tasks import Task, load_suite

log = logging.getLogger("kernelrl.training")

# Flags that zero a reward whatever the booleans say (the evaluator's fatal set; success already implies none).
try:
    from kernelrl.evaluation.flags import FATAL as FATAL_FLAGS
except Exception:  # pragma: no cover - the evaluator package is always there in this repo
    FATAL_FLAGS = frozenset()


def recipe_tasks(recipe, settings=None) -> list[Task]:
    """The recipe's tasks: its suite and levels, at most ``task_limit`` spread round-robin over the levels
    (the same pick as ``kernelrl.reports.runner.limit_tasks``, so bench scores the tasks that were trained)."""
    suite = recipe.suite
    if suite == "kernelbench":
        from kernelrl.errors import ConfigError

        if settings is None:
            from kernelrl.config.settings import get_settings

            settings = get_settings()
        kb = settings.kernelbench_dir
        if not kb:
            raise ConfigError("recipe suite 'kernelbench' needs KERNELRL_KERNELBENCH_DIR (a KernelBench checkout)")
        suite = str(kb)
    tasks = load_suite(suite, recipe.levels)
    if not tasks:  # e.g. levels: [9] of the builtin suite: a stage over no tasks is bad input, not a done stage
        from kernelrl.errors import ConfigError

        raise ConfigError(f"recipe {recipe.name}: suite {recipe.suite!r} has no tasks at levels {recipe.levels}")
    limit = recipe.task_limit
    if not limit:
        return tasks
    by_level: dict[int, list[Task]] = {}
    for t in tasks:
        by_level.setdefault(t.level, []).append(t)
    picked: list[Task] = []
    i = 0
    while len(picked) < min(limit, len(tasks)):
        picked += [by_level[lvl][i] for lvl in sorted(by_level) if i < len(by_level[lvl])][: limit - len(picked)]
        i += 1
    return picked


def atomic_json(path: Path, data: Any) -> None:
    """Write JSON so that a reader (or a resumed run) never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def read_json(path: Path, default: Any = None) -> Any:
    path = Path(path)
    if not path.exists():
        return default
    return json.loads(path.read_text())


def completion_text(code: str) -> str:
    """How a training target looks: the code in one fenced block (what the augmentation prompt asks for)."""
    code = code if code.endswith("\n") else code + "\n"
    return f"```python\n{code}```"


def set_seed_everywhere(seed: int) -> None:
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


@dataclass
class Sample:
    """One generation to record and evaluate."""

    task: Task
    gen: Any  # kernelrl.llm.backends.base.Generation (text, prompt_tokens, completion_tokens, error)
    prompt: list[dict] | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # snapshot, exemplar_ids (crl)


def is_success(r: dict[str, Any]) -> bool:
    return bool(r.get("success", r.get("executable") and r.get("correct"))) and float(r.get("speedup") or 0) > 0 \
        and not (set(r.get("flags") or []) & set(FATAL_FLAGS))


def reward_of(r: dict[str, Any]) -> float:
    """The speedup score: 0 when unparseable, unsuccessful or carrying a fatal flag."""
    return float(r.get("speedup") or 0.0) if is_success(r) else 0.0


def evaluate_samples(store, svc, samples: list[Sample], *, stage: str, run: str, model: str,
                     key_prefix: str, timeout_s: float = 3600) -> list[dict[str, Any]]:
    """Parse each generation, store it as an attempt (with its candidate when the code parsed), evaluate the
    parsed ones in one batch through the service; one result dict per sample, in order (``source`` added,
    ``unparsed`` flag when there was no code)."""
    from kernelrl.evaluation.service import EvalRequest
    from kernelrl.llm.parsing import parse_response

    results: list[dict[str, Any] | None] = [None] * len(samples)
    reqs, idx, codes = [], [], {}
    for i, s in enumerate(samples):
        text = s.gen.text or ""
        parsed = parse_response(text) if not getattr(s.gen, "error", None) else None
        tid = store.upsert_task(s.task)
        cid = None
        prompt = json.dumps(s.prompt) if s.prompt is not None else None
        if parsed is not None and parsed.ok:
            cid = store.add_candidate(tid, parsed.code, origin_stage=stage, origin_model=model, run_name=run,
                                      prompt=prompt, analysis=parsed.analysis, design=parsed.design,
                                      meta={k: v for k, v in s.meta.items() if k in ("snapshot", "exemplar_ids")})
            reqs.append(EvalRequest(s.task, parsed.code, candidate_id=cid, origin_stage=stage, origin_model=model,
                                    run_name=run))
            idx.append(i)
            codes[i] = parsed.code
        err = getattr(s.gen, "error", None) or (parsed.error if parsed is not None else None)
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        store.add_attempt(tid, stage=stage, run_name=run, model=model, prompt=prompt, response=text,
                          parse_error=err if cid is None else None, candidate_id=cid,
                          prompt_tokens=getattr(s.gen, "prompt_tokens", None),
                          completion_tokens=getattr(s.gen, "completion_tokens", None),
                          exemplar_ids=list(s.meta.get("exemplar_ids") or []), snapshot=s.meta.get("snapshot"),
                          dedup_key=f"{key_prefix}:{i}:{digest}"[:200])
    if reqs:
        for i, r in zip(idx, svc.evaluate_many(reqs, timeout_s=timeout_s)):
            results[i] = dict(r, source=codes[i], success=is_success(r))
    return [r if r is not None else {"success": False, "executable": False, "correct": False, "speedup": 0.0,
                                     "flags": ["unparsed"], "source": None} for r in results]


def eval_service(store, eval_cfg, gpus=None):
    """The evaluation service of a training stage. ``KERNELRL_EVAL_LOCAL_WORKERS`` (default 1) sets its in-process
    worker threads; 0 relies on ``kernelrl worker``/``kernelrl workers up`` processes on the dedicated evaluation
    GPUs. ``gpus``: the recipe's GPU roles; when they name evaluator GPUs the stage runs no worker of its own
    (``kernelrl.config.gpus.local_eval_workers``: training GPUs never time candidates). ``KERNELRL_EVAL_LEASE_S``
    (default 30) is how long an in-process worker's claim on a job lasts without a heartbeat (one every third of
    it): after a killed stage, its rerun takes the dead stage's job over once that lapses."""
    from kernelrl.config.gpus import local_eval_workers
    from kernelrl.evaluation.service import EvalService

    n = local_eval_workers(gpus)
    lease = float(os.environ.get("KERNELRL_EVAL_LEASE_S", "30"))
    if not lease > 0:
        raise ValueError(f"KERNELRL_EVAL_LEASE_S must be > 0 seconds, got {lease!r}")
    return EvalService(store, eval_cfg, local_workers=n, lease_s=lease)


def quantiles(xs: list[float]) -> tuple[float, float, float]:
    if not xs:
        return (0.0, 0.0, 0.0)
    if len(xs) == 1:
        return (xs[0],) * 3
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return (q[0], q[1], q[2])


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Success rate and speedup statistics of a batch of results (unsuccessful count as speedup 0)."""
    sp = [reward_of(r) for r in results]
    succ = [r for r in results if is_success(r)]
    q = quantiles(sp)
    parsed = [r for r in results if "unparsed" not in (r.get("flags") or [])]
    return {"samples": len(results), "parsed_rate": round(len(parsed) / max(len(results), 1), 4),
            "success_rate": round(len(succ) / max(len(results), 1), 4),
            "mean_speedup": round(sum(sp) / max(len(sp), 1), 4),
            "speedup_p25": round(q[0], 4), "speedup_p50": round(q[1], 4), "speedup_p75": round(q[2], 4),
            "max_speedup": round(max(sp, default=0.0), 4),
            "distinct_sources": len({r.get("source") for r in succ})}


def load_policy(model_dir: str, device: str = "auto", dtype: str = "float32"):
    from kernelrl.llm.backends.hf import HFBackend

    return HFBackend(str(model_dir), device=device, dtype=dtype)


def sample_policy(backend, tasks: list[Task], k: int, *, max_tokens: int, temperature: float, seed: int = 0,
                  prompt_fn=None) -> list[Sample]:
    """k samples per task (augmentation prompt unless ``prompt_fn(task)`` says otherwise), seeded per task."""
    from kernelrl.llm.prompts import build_augment_messages

    out = []
    for i, t in enumerate(tasks):
        msgs = prompt_fn(t) if prompt_fn else build_augment_messages(t)
        gens = backend.generate([msgs], n=k, max_tokens=max_tokens, temperature=temperature,
                                seed=seed + 7919 * i)[0]
        out.extend(Sample(t, g, msgs) for g in gens)
    return out


def policy_eval(model_dir: str, tasks: list[Task], store, svc, *, k: int, max_tokens: int, temperature: float,
                stage: str, run: str, seed: int = 1234, device: str = "auto", prompt_fn=None,
                prompt_format: str = "augment", backend=None) -> dict[str, Any]:
    """Sample a policy k times per task and evaluate every sample: the success rate and speedup numbers each
    stage reports. The augmentation prompt unless ``prompt_fn(task)`` gives another (``prompt_format`` names it
    in ``generation`` and in the attempts' dedup keys); ``backend``: an already loaded policy."""
    backend = backend or load_policy(model_dir, device=device)
    samples = sample_policy(backend, tasks, k, max_tokens=max_tokens, temperature=temperature, seed=seed,
                            prompt_fn=prompt_fn)
    fmt_key = "" if prompt_format == "augment" else f"{prompt_format}:"  # augment keeps the keys runs already have
    res = evaluate_samples(store, svc, samples, stage=f"{stage}-eval", run=run, model=str(model_dir),
                           key_prefix=f"{run}:{stage}-eval:{fmt_key}{seed}")
    m = summarize(res)
    m["per_task"] = {}
    for s, r in zip(samples, res):
        d = m["per_task"].setdefault(s.task.key, {"samples": 0, "successes": 0, "speedups": []})
        d["samples"] += 1
        d["successes"] += int(is_success(r))
        d["speedups"].append(round(reward_of(r), 3))
    m["generation"] = {"max_tokens": max_tokens, "temperature": temperature, "k": k, "seed": seed,
                       "prompt_format": prompt_format, "checkpoint": str(model_dir)}
    return m
