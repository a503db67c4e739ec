"""Supervised fine-tuning with trl's SFTTrainer: (augmentation prompt -> successful code), loss on the code only.

    pairs = augment_pairs(store, tasks, run="r1")            # successful augmentation snippets of this run
    final = sft_train(base_model_dir, pairs, work_dir, recipe.sft, seed=0, dtype="float32")

- Data: conversational prompt-completion rows (``prompt`` = the augmentation messages, ``completion`` = one
  assistant message with the code in a fenced block). trl masks the prompt (``completion_only_loss``), so the
  loss is on the completion tokens (and the EOS the chat template puts after an assistant turn).
- LoRA (peft, all linear layers) or full fine-tuning by ``sft.lora``. A LoRA run is merged into the base model
  at the end, so every stage hands the next a plain HF model directory.
- Checkpoints every ``save_steps`` under ``<out_dir>/trainer/checkpoint-N`` (model, optimizer, scheduler, RNG,
  trainer state); a re-run resumes from the newest one. The final model is written to a temp dir and renamed
  to ``<out_dir>/final`` (with a ``kernelrl-final.json`` marker), so ``final`` is either complete or absent.
- Under ``accelerate launch`` every rank trains (DDP/FSDP from the accelerate config); rank 0 alone writes the
  merged final model, the others wait.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from kernelrl.training import dist
from kernelrl.training.common import completion_text

log = logging.getLogger("kernelrl.training.sft")
FINAL_MARKER = "kernelrl-final.json"


def augment_pairs(store, tasks, run: str, stages: tuple[str, ...] = ("augment",)) -> list[dict[str, Any]]:
    """(prompt, completion) rows from the successful candidates that this run's attempts of ``stages``
    produced, by their latest evaluation; ordered by task then candidate id (deterministic)."""
    from sqlalchemy import select

    from kernelrl.llm.prompts import build_augment_messages
    from kernelrl.store.models import AttemptRow

    rows = []
    for task in tasks:
        tid = store.upsert_task(task)
        with store.session() as s:
            mine = set(s.scalars(select(AttemptRow.candidate_id).where(
                AttemptRow.task_id == tid, AttemptRow.run_name == run, AttemptRow.stage.in_(stages),
                AttemptRow.candidate_id.is_not(None))).all())
        good = sorted((c for c in store.scored_candidates(tid) if c["candidate_id"] in mine),
                      key=lambda c: c["candidate_id"])
        msgs = build_augment_messages(task)
        for c in good:
            rows.append({"prompt": msgs, "completion": [{"role": "assistant", "content": completion_text(c["source"])}],
                         "task_key": task.key, "candidate_id": c["candidate_id"], "speedup": c["speedup"]})
    return rows


def with_contrastive_copies(rows: list[dict], store, tasks, recipe, copies: int, token_counter=None,
                            seed: int = 0, run: str | None = None) -> list[dict]:
    """``rows`` plus, for each row, ``copies`` rows with the same completion under a contrastive prompt whose
    exemplars are drawn by the recipe's crl sampler from the pool crl will use (``crl.pool``: the run's own
    candidates, or the store; on the evaluation's device type) (see SFTConfig.contrastive_copies).
    Rows need ``task_key``; the draw is seeded by (seed, row index, copy)."""
    if copies <= 0:
        return rows
    import random

    from kernelrl.llm.prompts import contrastive_prompt
    from kernelrl.store.sampling import make_sampler, sample_exemplars
    from kernelrl.training.policy import device_scope, pool_scope

    by_key = {t.key: t for t in tasks}
    sampler = make_sampler(recipe.crl.sampler)
    dtype, kind = device_scope(recipe.eval)
    scope = pool_scope(recipe, run, device_type=dtype, device_kind=kind)
    out = list(rows)
    for i, r in enumerate(rows):
        task = by_key[r["task_key"]]
        tid = store.upsert_task(task)
        for c in range(copies):
            ex, _snap = sample_exemplars(store, tid, sampler, random.Random(f"{seed}:{i}:{c}"), **scope)
            p = contrastive_prompt(task, ex, token_counter, recipe.model.max_prompt_tokens)
            out.append({**r, "prompt": p.messages})
    return out


def torch_dtype(name: str):
    import torch

    return getattr(torch, name) if name and name != "auto" else "auto"


def is_final(d: Path) -> bool:
    return (Path(d) / FINAL_MARKER).exists()


def last_checkpoint(trainer_dir: Path) -> str | None:
    """The newest complete trainer checkpoint (a killed save leaves no trainer_state.json: skipped)."""
    trainer_dir = Path(trainer_dir)
    if not trainer_dir.exists():
        return None
    ckpts = [p for p in trainer_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()
             and (p / "trainer_state.json").exists()]
    return str(max(ckpts, key=lambda p: int(p.name.split("-")[-1]))) if ckpts else None


def drop_too_long(rows: list[dict], tokenizer, max_length: int) -> tuple[list[dict], int]:
    """Examples whose prompt + completion exceed ``max_length`` tokens are dropped (a truncated kernel would
    teach the model to stop mid-file)."""
    keep = []
    for r in rows:
        enc = tokenizer.apply_chat_template(r["prompt"] + r["completion"], tokenize=True)
        n = len(enc["input_ids"] if hasattr(enc, "keys") else enc)  # transformers 5 returns a BatchEncoding
        if n <= max_length:
            keep.append(r)
    return keep, len(rows) - len(keep)


def lora_config(r: int, alpha: int):
    from peft import LoraConfig

    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, task_type="CAUSAL_LM", target_modules="all-linear")


def write_final(trainer, base_model: str, tokenizer, out_dir: Path, *, lora: bool, dtype: str,
                extra: dict | None = None) -> Path:
    """Save the trained policy as a plain HF model at ``out_dir/final`` (merged when LoRA), atomically.
    Every rank must call it (FSDP gathers the weights); only rank 0 writes."""
    final = out_dir / "final"
    raw = out_dir / "final.raw"
    if dist.is_main():
        shutil.rmtree(raw, ignore_errors=True)
    dist.barrier()
    trainer.save_model(str(raw))  # collective under FSDP; writes on the main process
    dist.barrier()
    if dist.is_main():
        tmp = out_dir / "final.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        if lora:
            import torch
            from peft import PeftModel
            from transformers import AutoModelForCausalLM

            base = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch_dtype(dtype))
            merged = PeftModel.from_pretrained(base, str(raw)).merge_and_unload()
            with torch.no_grad():
                merged.save_pretrained(tmp)
        else:
            shutil.copytree(raw, tmp)
            for junk in ("training_args.bin",):
                (tmp / junk).unlink(missing_ok=True)
        tokenizer.save_pretrained(tmp)
        (tmp / FINAL_MARKER).write_text(json.dumps({"base": str(base_model), "lora": lora, **(extra or {})}))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        shutil.rmtree(raw, ignore_errors=True)
    dist.barrier()
    return final


def data_parallel_rows(rows: list[dict], batch: int, world: int, seed: int) -> tuple[list[dict], dict]:
    """With ``world`` > 1 training processes: ``batch`` is the batch of one optimizer (micro-)step, split over the
    processes (accelerate's split_batches), and an epoch's uneven last batch is split as it is (even_batches off),
    so N processes take the very steps one process takes. Why: with the per-process batch and accelerate's
    defaults, the last batch of every epoch was filled up with examples from the epoch's start, so 2 processes
    saw one example more per epoch than 1 and their sft loss ran ahead, to half of one process's at step 160 on
    gpu-smoke (bench/results/2026-11-27-h100x4-dp-noise); with this, 2 processes match 1 within float noise
    (measured on CPU with gloo, same seeds). A last batch smaller than ``world`` would leave a process without
    an example: it gets ``world - r`` repeats of examples drawn with ``seed`` (the only case where examples repeat).
    Returns the rows and the extra SFTConfig arguments."""
    if world <= 1:
        return rows, {}
    dist.check_step_batch(batch, world)
    r = len(rows) % batch
    if 0 < r < world:
        import random

        rng = random.Random(seed)
        rows = rows + [rows[rng.randrange(len(rows))] for _ in range(world - r)]
        log.info("sft: %d repeated example(s) so that each of the %d processes has one in the last batch",
                 world - r, world)
    return rows, {"accelerator_config": {"split_batches": True, "even_batches": False}}


def sft_train(model_path: str, pairs: list[dict], out_dir: Path, cfg, *, seed: int = 0, dtype: str = "float32",
              log_path: Path | None = None, progress=None, span: tuple[float, float] = (0.0, 1.0),
              label: str = "sft") -> Path:
    """Train on ``pairs`` (resuming from ``out_dir/trainer``'s newest checkpoint) and return ``out_dir/final``.
    ``progress(fraction, message)`` gets a line every ``log_every`` steps, mapped into ``span`` of the stage;
    the full metrics go to ``out_dir/trainer-log.jsonl`` and the trackers (kernelrl.training.tracking)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig as TrlSFTConfig

    from kernelrl.training.tracking import attach_tracking, report_to
    from trl import SFTTrainer

    out_dir = Path(out_dir)
    final = out_dir / "final"
    if is_final(final):
        return final
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(model_path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    rows, dropped = drop_too_long([{"prompt": p["prompt"], "completion": p["completion"]} for p in pairs], tok,
                                  cfg.max_length)
    if dropped:
        log.warning("sft: %d of %d examples are longer than max_length=%d tokens and were dropped", dropped,
                    len(pairs), cfg.max_length)
    if not rows:
        from kernelrl.errors import KernelRLError

        raise KernelRLError(f"sft: no training example fits max_length={cfg.max_length} tokens")
    cuda = torch.cuda.is_available()
    rows, parallel = data_parallel_rows(rows, cfg.batch_size, dist.world_size(), seed)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype(dtype))
    args = TrlSFTConfig(
        output_dir=str(out_dir / "trainer"), num_train_epochs=cfg.epochs, learning_rate=cfg.learning_rate,
        per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.grad_accum, **parallel,
        max_length=cfg.max_length, completion_only_loss=True, save_steps=cfg.save_steps, save_total_limit=2,
        logging_steps=max(1, min(10, cfg.save_steps)), report_to=report_to(), bf16=cuda and dtype == "bfloat16",
        use_cpu=not cuda, seed=seed, data_seed=seed, lr_scheduler_type="constant_with_warmup",
        warmup_steps=min(5, max(1, cfg.save_steps // 2)), weight_decay=0.0, disable_tqdm=True,
        dataloader_num_workers=0, save_only_model=False, gradient_checkpointing=cfg.gradient_checkpointing)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok,
                         peft_config=lora_config(cfg.lora_r, cfg.lora_alpha) if cfg.lora else None)
    attach_tracking(trainer, out_dir, label=label, progress=progress, span=span)
    resume = last_checkpoint(out_dir / "trainer")
    if resume:
        log.info("sft: resuming from %s", resume)
    trainer.train(resume_from_checkpoint=resume)
    if log_path is not None and dist.is_main():
        from kernelrl.training.common import atomic_json

        atomic_json(log_path, {"resumed_from": resume, "examples": len(rows), "dropped": dropped,
                               "log_history": trainer.state.log_history})
    return write_final(trainer, model_path, tok, out_dir, lora=cfg.lora, dtype=dtype,
                       extra={"examples": len(rows), "resumed_from": resume, "steps": trainer.state.global_step})
