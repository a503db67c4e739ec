"""A policy's prompts outside its training loop: the run's exemplar pool, the prompt formats, and the recorded
provenance of an evaluation (which pool, prompt format, checkpoint and seeds).

    scope = pool_scope(recipe, "r1", device_type="cpu")      # the pool crl.pool names, on one device type
    fmts = prompt_formats("both", "crl", recipe)             # ["contrastive", "augment"]: own format first
    fn, prov = prompt_fn_for("contrastive", tasks, store, recipe, scope, counter, seed=7)
    m = policy_eval(model_dir, tasks, store, svc, ..., prompt_fn=fn, prompt_format="contrastive")

Formats: ``augment`` (the one-shot prompt sft and selfsup train on), ``contrastive`` (the crl prompt: exemplars
with their speedups drawn by the recipe's crl sampler from the pool as of a fixed snapshot, one prompt per task
seeded by (seed, task)), ``plain`` is crl's name for the augmentation prompt (``crl.prompt: plain``).
"""

from __future__ import annotations

import random
import time
from typing import Any

STAGE_ORDER = ("sft", "selfsup", "crl")


def own_prompt(stage: str, recipe) -> str:
    """The prompt format a stage trains its policy on: augment for sft/selfsup, crl.prompt's for crl."""
    if stage == "crl" and recipe.crl.prompt == "contrastive":
        return "contrastive"
    return "augment"


def prompt_formats(choice: str, stage: str, recipe) -> list[str]:
    """``own`` / ``augment`` / ``contrastive`` / ``both`` -> the formats to evaluate, the stage's own first."""
    own = own_prompt(stage, recipe)
    if choice == "own":
        return [own]
    if choice == "both":
        return [own] + [f for f in ("augment", "contrastive") if f != own]
    return [choice]


def device_scope(eval_cfg, svc=None) -> tuple[str | None, str]:
    """(device type, device kind) whose measurements a pool may use: the evaluation service's when given (the
    device its workers time on), else the one the eval config resolves to here."""
    kind = getattr(svc, "device_kind", None)
    dtype = getattr(svc, "device_type", None)
    if svc is None:
        from kernelrl.evaluation.service import resolve_device

        device = resolve_device(eval_cfg.device)
        kind = "cuda" if device.startswith("cuda") else "cpu"
        try:
            from kernelrl.config.devices import device_name

            dtype = device_name(device)
        except Exception:  # no GPU visible here (workers elsewhere): filter by kind only
            dtype = None
    return dtype, kind or "cpu"


def pool_scope(recipe, run: str | None, *, device_type: str | None = None, device_kind: str | None = None
               ) -> dict[str, Any]:
    """The filters of ``kernelrl.store.sampling.load_pool`` for this recipe's pool (``crl.pool``): the run's own
    candidates (``run``) or the whole store (``store``, or no run name given), measured on one device type."""
    return {"run_name": run if recipe.crl.pool == "run" and run else None, "device_type": device_type,
            "device_kind": device_kind}


def describe_pool(scope: dict[str, Any], as_of: int | None = None) -> str:
    """One line for reports: ``run r1's own candidates, device type cpu, as of evaluation 42``."""
    who = f"run {scope['run_name']}'s own candidates" if scope.get("run_name") else "every candidate in the store"
    dev = (f"device type {scope['device_type']}" if scope.get("device_type")
           else f"device kind {scope.get('device_kind') or 'any'}")
    return f"{who}, {dev}" + (f", as of evaluation {as_of}" if as_of else "")


def contrastive_messages(task, store, recipe, scope: dict[str, Any], rng: random.Random, *, as_of: int | None,
                         token_counter=None, sampler=None) -> tuple[list[dict], list[int], int]:
    """(messages, shown exemplar ids, snapshot) of one contrastive prompt for ``task`` from the scoped pool."""
    from kernelrl.llm.prompts import contrastive_prompt
    from kernelrl.store.sampling import make_sampler, sample_exemplars

    sampler = sampler or make_sampler(recipe.crl.sampler)
    ex, snap = [], as_of or 0
    if recipe.crl.sampler.n_exemplars > 0:
        ex, snap = sample_exemplars(store, store.upsert_task(task), sampler, rng, as_of=as_of, **scope)
    p = contrastive_prompt(task, ex, token_counter, recipe.model.max_prompt_tokens)
    return p.messages, [e.candidate_id for e in p.shown], int(snap or 0)


def prompt_fn_for(fmt: str, tasks, store, recipe, scope: dict[str, Any], token_counter=None, *, seed: int,
                  as_of: int | None = None):
    """(prompt_fn(task) for ``kernelrl.training.common.sample_policy``, provenance dict). Contrastive prompts are
    built now, one per task (seeded by (seed, task)), from the pool as of ``as_of`` (default: the store now)."""
    from kernelrl.llm.prompts import build_augment_messages

    prov: dict[str, Any] = {"prompt_format": fmt, "seed": seed}
    if fmt in ("augment", "plain"):
        return build_augment_messages, prov
    from kernelrl.store.sampling import make_sampler

    if as_of is None:
        from kernelrl.training.crl import store_snapshot

        as_of = store_snapshot(store)
    sampler = make_sampler(recipe.crl.sampler)  # a fresh one: an island sampler's training state stays untouched
    prompts, shown = {}, {}
    for t in tasks:
        msgs, ids, _snap = contrastive_messages(t, store, recipe, scope, random.Random(f"{seed}:{t.key}"),
                                                as_of=as_of, token_counter=token_counter, sampler=sampler)
        prompts[t.key], shown[t.key] = msgs, ids
    prov.update(pool=describe_pool(scope, as_of), pool_scope=dict(scope), as_of=as_of, exemplar_ids=shown,
                sampler=recipe.crl.sampler.kind, n_exemplars=recipe.crl.sampler.n_exemplars)
    return (lambda t: prompts[t.key]), prov


def evaluate_checkpoint(model_dir: str, stage: str, tasks, store, svc, recipe, *, run: str, choice: str, k: int,
                        max_tokens: int, temperature: float, seed: int, scope: dict[str, Any],
                        device: str = "auto") -> dict[str, Any]:
    """The end-of-stage policy evaluation in the formats ``choice`` names (``PolicyEvalKnobs.eval_prompt``): the
    own format's numbers at the top level, every format's under ``by_prompt``, and ``provenance`` (checkpoint,
    prompt format, pool, seeds) for each."""
    from kernelrl.training.common import load_policy, policy_eval

    t0 = time.monotonic()
    backend = load_policy(model_dir, device=device)
    out: dict[str, Any] = {}
    by_prompt: dict[str, Any] = {}
    for fmt in prompt_formats(choice, stage, recipe):
        fn, prov = prompt_fn_for(fmt, tasks, store, recipe, scope, backend.count_tokens, seed=seed)
        m = policy_eval(model_dir, tasks, store, svc, k=k, max_tokens=max_tokens, temperature=temperature,
                        stage=stage, run=run, seed=seed, prompt_fn=fn, prompt_format=fmt, backend=backend)
        m["provenance"] = dict(prov, checkpoint=str(model_dir), stage=stage, k=k, temperature=temperature)
        by_prompt[fmt] = m
        if not out:
            out = dict(m)
    if len(by_prompt) > 1:
        out["by_prompt"] = {f: {k2: v for k2, v in m.items() if k2 != "per_task"} for f, m in by_prompt.items()}
    out["wall_s"] = round(time.monotonic() - t0, 2)
    return out
