"""The bodies of the sft, selfsup and crl steps (``steps/<stage>.py`` call these with their StepContext).

Each returns ``{"outputs": {...}, "metrics": {...}}`` on the main process. Under ``accelerate launch`` every
rank trains; rank 0 alone reads upstream work it must generate/evaluate, writes store rows, syncs checkpoints
and evaluates the policy, and the others wait for it where they need its results.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from kernelrl.training import dist
from kernelrl.training.common import (atomic_json, completion_text, eval_service, evaluate_samples, is_success,
                                      read_json, recipe_tasks, sample_policy, summarize)

log = logging.getLogger("kernelrl.training")


def stage_seed(recipe_seed: int, stage_seed_: int) -> int:
    """The trainer's seed (data order, LoRA init) from the recipe's seed and the stage's own ``seed`` knob: both
    count (before 2026-11-27 the stage's knob was ignored, so sft.seed=1 and sft.seed=2 trained identically)."""
    return int(recipe_seed) * 1000 + int(stage_seed_)


def progress(frac: float, msg: str) -> None:
    if dist.is_main():
        print(f"KERNELRL_PROGRESS {min(max(frac, 0.0), 1.0):.3f} {msg}", flush=True)


def sync_checkpoint(settings, local: Path, name: str) -> str:
    """Copy a finished local model dir to the checkpoint store as ``name``. ``put_dir`` sends only files whose
    size/sha256 differ, so re-running a finished stage costs a few hashes and a stale copy is replaced."""
    from kernelrl.checkpoints import open_checkpoint_store

    store = open_checkpoint_store(settings.resolved_checkpoint_uri)
    store.put_dir(local, name)
    return store.uri(name)


def token_counter(model_dir: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def base_model(ctx) -> str:
    from kernelrl.llm.tiny import resolve_model_path

    return resolve_model_path(ctx.recipe.model, ctx.settings)


def stage_policy_eval(ctx, model_dir: str, cfg, tasks, svc=None) -> dict[str, Any]:
    """The end-of-stage policy evaluation: seeded, the same k/temperature/budget knobs in every stage, in the
    prompt format(s) of ``cfg.eval_prompt`` (own: the stage's training prompt); contrastive prompts draw from the
    run's pool (``crl.pool``) on the evaluation's device type. Records pool, format, checkpoint and seed."""
    from kernelrl.training.policy import device_scope, evaluate_checkpoint, pool_scope

    if cfg.eval_samples_per_task <= 0:
        return {}
    own = svc is None
    svc = svc or eval_service(ctx.store, ctx.recipe.eval, ctx.recipe.gpus)
    try:
        dtype, kind = device_scope(ctx.recipe.eval, svc)
        m = evaluate_checkpoint(model_dir, ctx.stage, tasks, ctx.store, svc, ctx.recipe, run=ctx.run,
                                choice=cfg.eval_prompt, k=cfg.eval_samples_per_task,
                                max_tokens=cfg.eval_max_new_tokens, temperature=cfg.eval_temperature,
                                seed=ctx.recipe.seed * 1000 + 1234,
                                scope=pool_scope(ctx.recipe, ctx.run, device_type=dtype, device_kind=kind))
    finally:
        if own:
            svc.close()
    return m


# -- augment ------------------------------------------------------------------------------------------------------
def run_augment_stage(ctx) -> dict[str, Any]:
    """Teachers (or the seed corpus offline) answer every task; every answer stored and evaluated."""
    from kernelrl.training.augment import run_augment

    if ctx.dry_run:
        tasks = recipe_tasks(ctx.recipe, ctx.settings)
        return {"metrics": {"tasks": len(tasks), "teachers": list(ctx.recipe.augment.teachers)}}
    return {"metrics": run_augment(ctx.store, ctx.recipe, ctx.run, ctx.settings, progress=progress)}


# -- sft ----------------------------------------------------------------------------------------------------------
def run_sft(ctx) -> dict[str, Any]:
    from kernelrl.errors import KernelRLError
    from kernelrl.training.sft import augment_pairs, sft_train, with_contrastive_copies

    r = ctx.recipe  # augment has finished: stage_body checked STAGE_NEEDS before importing this module
    tasks = recipe_tasks(r, ctx.settings)
    pairs = augment_pairs(ctx.store, tasks, ctx.run)
    if ctx.dry_run:
        return {"metrics": {"pairs": len(pairs), "tasks": len(tasks)}}
    if not pairs:
        raise KernelRLError(f"run {ctx.run!r}: augmentation produced no successful snippet to train on")
    t0 = time.monotonic()
    base = base_model(ctx)
    rows = with_contrastive_copies(pairs, ctx.store, tasks, r, r.sft.contrastive_copies, token_counter(base), r.seed,
                                   run=ctx.run)
    progress(0.0, f"sft on {len(pairs)} pairs ({len(rows)} examples)")
    final = sft_train(base, rows, ctx.work_dir, r.sft, seed=stage_seed(r.seed, r.sft.seed), dtype=r.model.dtype,
                      log_path=ctx.work_dir / "train-log.json", progress=progress, span=(0.0, 0.8))
    train_s = time.monotonic() - t0
    if not dist.is_main():
        return {}
    uri = sync_checkpoint(ctx.settings, final, f"runs/{ctx.run}/sft/final")
    progress(0.8, "sft: evaluating the policy")
    pe = stage_policy_eval(ctx, str(final), r.sft, tasks)
    info = read_json(final / "kernelrl-final.json", {})
    hist = (read_json(ctx.work_dir / "train-log.json", {}) or {}).get("log_history", [])
    losses = [h["loss"] for h in hist if "loss" in h]
    m = {"pairs": len(pairs), "examples": len(rows), "tasks": len(tasks), "train_s": round(train_s, 2),
         "steps": info.get("steps"), "resumed_from": info.get("resumed_from"),
         "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None, **pe}
    return {"outputs": {"checkpoint": uri, "model_dir": str(final)}, "metrics": m}


# -- selfsup ------------------------------------------------------------------------------------------------------
def run_selfsup(ctx) -> dict[str, Any]:
    """Iterations of sample -> evaluate -> keep successes -> SFT on them, one checkpoint per iteration; a
    state file (written atomically after each iteration) makes a re-run skip finished iterations."""
    from kernelrl.llm.prompts import build_augment_messages
    from kernelrl.training.common import load_policy
    from kernelrl.training.sft import augment_pairs, is_final, sft_train, with_contrastive_copies

    r, s = ctx.recipe, ctx.recipe.selfsup
    start_model = ctx.upstream("sft")["outputs"]["model_dir"]
    tasks = recipe_tasks(r, ctx.settings)
    if ctx.dry_run:
        return {"metrics": {"iterations": s.iterations, "tasks": len(tasks), "start_model": start_model}}
    state_path = ctx.work_dir / "state.json"
    state = read_json(state_path) or {"iterations": [], "model_dir": start_model}
    svc = eval_service(ctx.store, r.eval, r.gpus) if dist.is_main() else None
    try:
        for it in range(len(state["iterations"]), s.iterations):
            t0 = time.monotonic()
            progress(0.9 * it / max(s.iterations, 1), f"selfsup iteration {it + 1}/{s.iterations}: sampling")
            rows, stats = None, None
            if dist.is_main():
                backend = load_policy(state["model_dir"])
                samples = sample_policy(backend, tasks, s.samples_per_task, max_tokens=s.max_new_tokens,
                                        temperature=s.temperature, seed=r.seed * 1000 + 100 * (it + 1))
                del backend
                gen_s = time.monotonic() - t0
                results = evaluate_samples(ctx.store, svc, samples, stage="selfsup", run=ctx.run,
                                           model=state["model_dir"], key_prefix=f"{ctx.run}:selfsup:{it}")
                stats = summarize(results) | {"generation_s": round(gen_s, 2),
                                              "evaluation_s": round(time.monotonic() - t0 - gen_s, 2)}
                if s.keep_previous:
                    rows = augment_pairs(ctx.store, tasks, ctx.run, stages=("augment", "selfsup"))
                else:  # REINFORCE, reward 1/0, no baseline: every successful sample once, duplicates included
                    msgs = {t.key: build_augment_messages(t) for t in tasks}
                    rows = [{"prompt": msgs[smp.task.key], "task_key": smp.task.key,
                             "completion": [{"role": "assistant", "content": completion_text(res["source"])}]}
                            for smp, res in zip(samples, results) if is_success(res) and res.get("source")]
                stats["successes"] = sum(1 for res in results if is_success(res))
                rows = with_contrastive_copies(rows, ctx.store, tasks, r, s.sft.contrastive_copies,
                                               token_counter(state["model_dir"]), r.seed + it + 1, run=ctx.run)
                stats["trained_on"] = len(rows)
            rows, stats = dist.broadcast((rows, stats))
            it_dir = ctx.work_dir / f"iter-{it}"
            entry = {"iteration": it, **stats, "model_in": state["model_dir"]}
            if rows:
                t1 = time.monotonic()
                n_it, seed = max(s.iterations, 1), stage_seed(r.seed, s.sft.seed) + it + 1
                new = sft_train(state["model_dir"], rows, it_dir, s.sft, seed=seed, dtype=r.model.dtype,
                                progress=progress, span=(0.9 * (it + 0.5) / n_it, 0.9 * (it + 1) / n_it),
                                label=f"selfsup iteration {it + 1}/{s.iterations}: sft")
                entry["train_s"] = round(time.monotonic() - t1, 2)
                if dist.is_main():
                    entry["checkpoint"] = sync_checkpoint(ctx.settings, new, f"runs/{ctx.run}/selfsup/iter-{it}")
                state["model_dir"] = str(new)
            else:
                log.warning("selfsup iteration %d: no successful sample; the policy is unchanged", it)
            entry["model_out"] = state["model_dir"]
            entry["wall_s"] = round(time.monotonic() - t0, 2)
            state["iterations"].append(entry)
            if dist.is_main():
                atomic_json(state_path, state)
                progress(0.9 * (it + 1) / max(s.iterations, 1),
                         f"selfsup iteration {it + 1}/{s.iterations}: success={stats['success_rate']:.0%} "
                         f"trained on {len(rows)} gen_s={stats['generation_s']:.1f} "
                         f"eval_s={stats['evaluation_s']:.1f}")
            dist.barrier()
        if not dist.is_main():
            return {}
        progress(0.9, "selfsup: evaluating the policy")
        pe = stage_policy_eval(ctx, state["model_dir"], s, tasks, svc)
    finally:
        if svc is not None:
            svc.close()
    final = Path(state["model_dir"])
    ckpt = state["iterations"][-1].get("checkpoint") if state["iterations"] else None
    if ckpt is None and is_final(final):  # no iteration trained: the SFT model goes on
        ckpt = ctx.upstream("sft")["outputs"].get("checkpoint")
    m = {"iterations": [{k: v for k, v in e.items() if k not in ("model_in",)} for e in state["iterations"]],
         "success_rate_per_iteration": [e["success_rate"] for e in state["iterations"]], **pe}
    return {"outputs": {"model_dir": str(final), "checkpoint": ckpt}, "metrics": m}


# -- crl ----------------------------------------------------------------------------------------------------------
def run_crl(ctx) -> dict[str, Any]:
    from kernelrl.training.crl import train_crl

    r = ctx.recipe
    up = ctx.upstream("selfsup")
    model_dir = up["outputs"]["model_dir"]
    tasks = recipe_tasks(r, ctx.settings)
    if ctx.dry_run:
        return {"metrics": {"steps": r.crl.steps, "group_size": r.crl.group_size, "tasks": len(tasks),
                            "start_model": model_dir}}
    res = train_crl(model_dir, tasks, ctx.store, r, ctx.run, ctx.work_dir, progress=progress)
    if not dist.is_main():
        return {}
    final = Path(res["model_dir"])
    uri = sync_checkpoint(ctx.settings, final, f"runs/{ctx.run}/crl/final")
    progress(0.95, "crl: evaluating the policy")
    pe = stage_policy_eval(ctx, str(final), r.crl, tasks)
    return {"outputs": {"checkpoint": uri, "model_dir": str(final), "metrics_log": res.get("metrics_log")},
            "metrics": {**pe, "training": res["metrics"]}}
