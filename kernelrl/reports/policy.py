"""The policy source of a report: what a trained checkpoint writes now, not the best kernel a run ever found.

    kernelrl bench --source policy:myrun/crl              # the crl policy, its own prompt format (contrastive)
    kernelrl bench --source policy:myrun/crl@both         # two rows: contrastive prompt and augmentation prompt
    kernelrl bench --source policy:myrun/auto@augment     # the last trained stage, augmentation prompt

``policy:RUN/STAGE[@FORMAT]``: STAGE is sft, selfsup, crl or auto (the last of them that finished in RUN);
FORMAT is own (default: the prompt the stage trained on), augment, contrastive or both. The stage's final
checkpoint (its manifest's ``model_dir``, else its checkpoint URI fetched from the checkpoint store) is sampled
k times per task with fixed seeds, the stage's ``eval_temperature`` and ``eval_max_new_tokens``; contrastive
prompts draw their exemplars from the run's pool (``crl.pool``) on the scoring device type as it stood when the
stage ended. Every sample is stored (attempt + candidate, stage ``bench-policy`` of the run) and becomes a row
of its own (unit ``kernel``): the row's success rate and mean are those of one sample of the policy. An answer
without code is an unsuccessful row. The source records which checkpoint, prompt format, pool and seeds it
used (``SourceResult.provenance`` and the Sources table's notes).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from kernelrl.errors import KernelRLError
from kernelrl.reports.sources import Pick, ResolvedSource
from kernelrl.tasks.loader import Task

log = logging.getLogger(__name__)
PREFIX = "policy:"
STAGES = ("sft", "selfsup", "crl")
FORMATS = ("own", "augment", "contrastive", "both")
ORIGIN = "bench-policy"  # the stage name the samples are stored under (a run's link: (candidate, run, bench-policy))
SEED_OFFSET = 4321  # bench samples: seed = recipe.seed * 1000 + this (the stages' own evaluation uses + 1234)


def is_policy_spec(spec: str) -> bool:
    return spec.startswith(PREFIX)


def parse_policy_spec(spec: str) -> tuple[str, str, str]:
    """``policy:RUN/STAGE[@FORMAT]`` -> (run, stage, format); KernelRLError naming what is wrong."""
    body = spec[len(PREFIX):]
    body, _, fmt = body.partition("@")
    run, _, stage = body.rpartition("/")
    fmt = fmt or "own"
    if not run or not stage:
        raise KernelRLError(f"--source {spec}: expected policy:RUN/STAGE[@FORMAT], e.g. policy:myrun/crl")
    if stage not in (*STAGES, "auto"):
        raise KernelRLError(f"--source {spec}: stage {stage!r} has no policy (expected {', '.join(STAGES)} or auto)")
    if fmt not in FORMATS:
        raise KernelRLError(f"--source {spec}: prompt format {fmt!r} (expected {', '.join(FORMATS)})")
    return run, stage, fmt


def last_trained_stage(store, run: str) -> str | None:
    """The last of sft, selfsup, crl that finished in ``run`` (None: none did)."""
    done = [st for st in STAGES if (store.stage_record(run, st) or {}).get("status") == "done"]
    return done[-1] if done else None


def run_recipe(store, run: str):
    """The recipe a run was made with (by name, as the run record has it); KernelRLError when unknown here."""
    from sqlalchemy import select

    from kernelrl.config.recipes import load_recipe
    from kernelrl.store.models import RunRow

    with store.session() as s:
        name = s.scalar(select(RunRow.recipe).where(RunRow.name == run))
    if not name:
        raise KernelRLError(f"run {run!r} has no recipe on record: pass --recipe")
    return load_recipe(name)


def checkpoint_dir(record: dict[str, Any], run: str, stage: str, settings=None) -> Path:
    """The stage's final model directory here: its manifest's ``model_dir`` when this machine has it (a local
    run), else its checkpoint fetched from the checkpoint store into ``<home>/cache/policies/``."""
    outputs = (record.get("manifest") or {}).get("outputs") or {}
    local = outputs.get("model_dir")
    if local and (Path(local) / "config.json").exists():
        return Path(local)
    uri = outputs.get("checkpoint")
    if not uri or f"runs/{run}/" not in str(uri):
        raise KernelRLError(f"run {run!r} stage {stage}: no model directory here and no checkpoint URI recorded")
    from kernelrl.checkpoints import open_checkpoint_store

    if settings is None:
        from kernelrl.config.settings import get_settings

        settings = get_settings()
    name = f"runs/{run}/" + str(uri).split(f"runs/{run}/", 1)[1]
    dest = Path(open_checkpoint_store(settings).get_dir(name, Path(settings.home) / "cache" / "policies" / name))
    if not (dest / "config.json").exists():
        raise KernelRLError(f"run {run!r} stage {stage}: checkpoint {uri} is not a model directory (no config.json)")
    return dest


def _metrics(record: dict[str, Any]) -> dict[str, Any]:
    return (record.get("manifest") or {}).get("metrics") or {}


def stage_snapshot(record: dict[str, Any]) -> int | None:
    """The exemplar snapshot the stage ended at, so contrastive prompts see that pool: crl records it, and so does
    a stage evaluated in the contrastive format; otherwise None (the pool as it is now)."""
    m = _metrics(record)
    snap = (m.get("training") or {}).get("final_snapshot") or (m.get("provenance") or {}).get("as_of")
    return int(snap) if snap else None


def pool_as_of(spec: str | int | None, store, run: str) -> int | None:
    """``--policy-as-of``: None (each stage's own end), an evaluation id, or ``crl-start`` (the pool as the run's
    crl began: its recorded ``start_snapshot``, so the sft/selfsup and crl policies can be sampled on identical
    contrastive prompts that none of crl's own kernels shaped)."""
    if spec is None or spec == "":
        return None
    if isinstance(spec, int) or str(spec).isdigit():
        return int(spec)
    if str(spec) != "crl-start":
        raise KernelRLError(f"--policy-as-of {spec!r}: expected an evaluation id or crl-start")
    start = (_metrics(store.stage_record(run, "crl") or {}).get("training") or {}).get("start_snapshot")
    if not start:
        raise KernelRLError(f"--policy-as-of crl-start: run {run!r} has no crl stage that recorded its start "
                            "snapshot (crl of kernelrl 2026-11-27 or later); give an evaluation id instead")
    return int(start)


def resolve_policy(spec: str, tasks: list[Task], store, *, recipe=None, k: int | None = None,
                   seed: int | None = None, device_type: str | None = None, device_kind: str | None = None,
                   label: str | None = None, settings=None, device: str = "auto",
                   as_of: str | int | None = None) -> list[ResolvedSource]:
    """Sample the checkpoint a policy spec names and return one source per prompt format (own format first).

    Long because: resolving the stage, its recipe and checkpoint, then per format building prompts, sampling,
    storing every sample and turning it into a pick is one sequence whose provenance is recorded as it goes."""
    from kernelrl.llm.parsing import parse_response
    from kernelrl.training.common import load_policy, sample_policy
    from kernelrl.training.policy import pool_scope, prompt_fn_for, prompt_formats

    run, stage, choice = parse_policy_spec(spec)
    if stage == "auto":
        stage = last_trained_stage(store, run) or ""
        if not stage:
            raise KernelRLError(f"--source {spec}: run {run!r} has no finished sft, selfsup or crl stage")
    record = store.stage_record(run, stage)
    if record is None or record.get("status") != "done":
        raise KernelRLError(f"--source {spec}: run {run!r} stage {stage} has not finished")
    recipe = recipe or run_recipe(store, run)
    model_dir = checkpoint_dir(record, run, stage, settings)
    cfg = getattr(recipe, stage)
    k = int(k if k is not None else recipe.bench.policy_samples_per_task)
    if k < 1:
        raise KernelRLError(f"--source {spec}: samples per task must be >= 1, got {k}")
    seed = int(seed if seed is not None else recipe.seed * 1000 + SEED_OFFSET)
    scope = pool_scope(recipe, run, device_type=device_type, device_kind=device_kind)
    snapshot = pool_as_of(as_of, store, run)
    snapshot = stage_snapshot(record) if snapshot is None else snapshot
    backend = load_policy(str(model_dir), device=device)
    out = []
    try:
        for fmt in prompt_formats(choice, stage, recipe):
            fn, prov = prompt_fn_for(fmt, tasks, store, recipe, scope, backend.count_tokens, seed=seed,
                                     as_of=snapshot)
            samples = sample_policy(backend, tasks, k, max_tokens=cfg.eval_max_new_tokens,
                                    temperature=cfg.eval_temperature, seed=seed, prompt_fn=fn)
            picks, unparsed = [], 0
            for i, smp in enumerate(samples):
                text = smp.gen.text or ""
                parsed = parse_response(text) if not getattr(smp.gen, "error", None) else None
                tid = store.upsert_task(smp.task)
                cid = None
                if parsed is not None and parsed.ok:
                    cid = store.add_candidate(tid, parsed.code, origin_stage=ORIGIN, origin_model=str(model_dir),
                                              run_name=run, analysis=parsed.analysis, design=parsed.design,
                                              meta={"policy_stage": stage, "prompt_format": fmt, "seed": seed})
                digest = hashlib.sha256(text.encode()).hexdigest()[:12]
                store.add_attempt(tid, stage=ORIGIN, run_name=run, model=str(model_dir), response=text,
                                  parse_error=None if cid else (getattr(parsed, "error", None) or "no code"),
                                  candidate_id=cid, completion_tokens=getattr(smp.gen, "completion_tokens", None),
                                  exemplar_ids=list((prov.get("exemplar_ids") or {}).get(smp.task.key, [])),
                                  snapshot=prov.get("as_of"),
                                  dedup_key=f"{run}:{ORIGIN}:{stage}:{fmt}:{seed}:{i}:{digest}"[:200])
                unparsed += cid is None
                why = (parsed.error if parsed is not None else getattr(smp.gen, "error", None)) or "no code"
                picks.append(Pick(smp.task, parsed.code if cid else None, variant=f"sample {i % k}",
                                  origin=f"{stage} policy", candidate_id=cid, rank=i % k,
                                  note="" if cid else f"no code in the answer ({why})"))
            prov = dict(prov, checkpoint=str(model_dir), run=run, stage=stage, k=k,
                        temperature=cfg.eval_temperature, max_new_tokens=cfg.eval_max_new_tokens)
            notes = [f"checkpoint {model_dir}", f"{fmt} prompt, {k} samples per task, seed {seed}, temperature "
                     f"{cfg.eval_temperature}"]
            if prov.get("pool"):
                notes.append(f"exemplars from {prov['pool']}")
            if unparsed:
                notes.append(f"{unparsed} of {len(samples)} answers had no code (unsuccessful rows)")
            name = label or f"trained policy ({run} {stage}, {fmt} prompt)"
            if label and len(prompt_formats(choice, stage, recipe)) > 1:
                name = f"{label} ({fmt} prompt)"
            out.append(ResolvedSource(name, spec, picks, unit="kernel", reduce="none", notes=notes, run_name=run,
                                      missing="no sample", provenance=prov))
    finally:
        backend.close()
    return out
