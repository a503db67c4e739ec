"""Contrastive RL: trl's GRPOTrainer with contrastive prompts rebuilt from the exemplar store as training goes.

    res = train_crl(model_dir, tasks, store, recipe, run="r1", out_dir=work_dir)   # {"model_dir", "metrics", ...}

Prompts (``ContrastivePromptDataset``): trl's dataset is a column of slot ids, one slot per prompt the run will
use (``steps * prompts_per_step * grad_accum``); slot ``i`` is task ``i mod n_tasks``. The trainer's data
collator turns slot ids into prompts as batches are drawn: a slot's prompt is built the first time it is
drawn, from the store *as of* the current snapshot (the newest evaluation id the reward function has seen),
with the recipe's exemplar sampler (``crl.sampler``) seeded by (seed, slot), and then frozen. trl's
RepeatSampler hands the same slot id to all G samples of a group, so they see the identical prompt; every rank
builds it identically (same snapshot, same seed). The pool is the run's own candidates (``crl.pool: run``, the
paper's: its SFT data, then what its policies generate) or the whole store (``store``), counting only speedups
measured on the evaluation service's device type. ``crl.prompt: plain`` uses the augmentation prompt instead (no
exemplars, no contrastive instruction: the paper's plain-GRPO ablation). The slot's
``snapshot`` and ``exemplar_ids`` columns reach the reward function through its kwargs and are stored on every
attempt, so any prompt can be rebuilt later (``sample_exemplars(..., as_of=snapshot)``).

Reward (``SpeedupReward``): parses each completion, evaluates the code through the evaluation service and
returns the speedup (0 when unparseable, unsuccessful or flagged). Under several processes the completions are
gathered to rank 0, which alone stores and evaluates them and sends the scores back. Every attempt is stored
(stage ``crl``, with snapshot + exemplar ids); every success is a candidate with an evaluation, hence a future
exemplar. After each scoring the dataset's snapshot advances, so later prompts see the new exemplars. With the
island sampler (``crl.sampler.kind: island``) each new candidate is assigned to the island its prompt drew from,
and every scoring ends a round for each task it scored (``advance``: the worse half of the islands is wiped and
reseeded every ``migration_interval`` rounds); every rank applies the same assignments, so their states agree.

Resume: trl checkpoints every ``save_steps`` (model, optimizer, scheduler, RNG, trainer state); beside them in
each ``checkpoint-N`` we save ``kernelrl-crl-state.json`` (the snapshot the dataset had reached, the island
sampler state). A re-run resumes from the newest checkpoint with that snapshot.

Per-step metrics, appended to ``<out_dir>/metrics.jsonl`` by rank 0: trl's (reward, reward_std, kl, loss,
completion lengths) plus ours: success rate, parsed rate, speedup quantiles, completion tokens/s, and the
step's time split between generation, evaluation (inside the reward) and update.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
from pathlib import Path
from typing import Any

import torch

from kernelrl.training import dist
from kernelrl.training.common import (Sample, atomic_json, evaluate_samples, quantiles, read_json, reward_of,
                                      summarize)

log = logging.getLogger("kernelrl.training.crl")
STATE_FILE = "kernelrl-crl-state.json"


def store_snapshot(store) -> int:
    """The newest evaluation id in the store (0 when empty): the exemplar pool as of now."""
    from sqlalchemy import func, select

    from kernelrl.store.models import EvaluationRow

    with store.session() as s:
        return int(s.scalar(select(func.max(EvaluationRow.id))) or 0)


class ContrastivePromptDataset:
    """Slot i -> a contrastive prompt for task ``i % len(tasks)``, built from the store on first access.
    ``hf_dataset()`` is what trl iterates (slot ids); ``collate`` is the trainer's data collator."""

    def __init__(self, tasks, store, recipe, n_slots: int, token_counter=None, state_path: Path | None = None,
                 run: str | None = None):
        """``run``: whose candidates form the pool under ``crl.pool: run`` (None: the whole store). The device
        scope starts as the eval config's device kind; ``train_crl`` narrows it to the service's device type."""
        from kernelrl.store.sampling import make_sampler
        from kernelrl.training.policy import pool_scope

        self.tasks, self.store, self.recipe, self.n = list(tasks), store, recipe, int(n_slots)
        self.sampler = make_sampler(recipe.crl.sampler, state_path=state_path if dist.is_main() else None)
        kind = "cuda" if str(recipe.eval.device).startswith("cuda") else "cpu" if recipe.eval.device == "cpu" else None
        self.scope = pool_scope(recipe, run, device_kind=kind)
        self.task_ids = {t.key: store.upsert_task(t) for t in self.tasks} if dist.is_main() else None
        self.task_ids = dist.broadcast(self.task_ids)
        self.counter = token_counter
        self.as_of: int | None = None  # None: the store as it is now (train_crl sets it, same on every rank)
        self.slots: dict[int, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        i = int(i)
        with self.lock:
            if i not in self.slots:
                self.slots[i] = self.build(i)
            return dict(self.slots[i])

    def hf_dataset(self):
        """A datasets.Dataset of slot ids (trl wants one); the placeholder prompt is never shown to the model."""
        from datasets import Dataset

        return Dataset.from_dict({"slot": list(range(self.n)),
                                  "prompt": [[{"role": "user",
                                               "content": "(built from the store when drawn)"}]] * self.n})

    def collate(self, features: list[dict]) -> list[dict]:
        return [self[int(f["slot"])] for f in features]

    def build(self, i: int) -> dict[str, Any]:
        from kernelrl.llm.prompts import build_augment_messages, contrastive_prompt
        from kernelrl.store.sampling import IslandSampler, sample_exemplars

        task = self.tasks[i % len(self.tasks)]
        if self.recipe.crl.prompt == "plain":  # the plain-GRPO ablation: the one-shot prompt, nothing sampled
            return {"prompt": build_augment_messages(task), "task_key": task.key, "snapshot": int(self.as_of or 0),
                    "exemplar_ids": "[]", "slot": i, "island": -1}
        rng = random.Random(f"{self.recipe.seed}:{self.recipe.crl.seed}:{i}")
        ex, snapshot, island = [], self.as_of or 0, -1
        if self.recipe.crl.sampler.n_exemplars > 0:
            tid = self.task_ids[task.key]
            ex, snapshot = sample_exemplars(self.store, tid, self.sampler, rng, as_of=self.as_of, **self.scope)
            if isinstance(self.sampler, IslandSampler) and self.sampler.last_island(tid) is not None:
                island = int(self.sampler.last_island(tid))
        p = contrastive_prompt(task, ex, self.counter, self.recipe.model.max_prompt_tokens)
        shown = [e.candidate_id for e in p.shown]
        return {"prompt": p.messages, "task_key": task.key, "snapshot": int(snapshot or 0),
                "exemplar_ids": json.dumps(shown), "slot": i, "island": island}

    def islands_round(self, assignments: list[tuple[str, int, int]], snapshot: int) -> int:
        """The island sampler's bookkeeping after a scoring: each new candidate joins the island its prompt drew
        from, then every task scored ends a round (migrating when due). Returns how many tasks migrated."""
        from kernelrl.store.sampling import IslandSampler, load_pool

        if not isinstance(self.sampler, IslandSampler):
            return 0
        for key, cid, island in assignments:
            if cid is not None and island >= 0:
                self.sampler.assign(cid, island, group=self.task_ids[key])
        migrated = 0
        for key in sorted({k for k, _, _ in assignments}):
            tid = self.task_ids[key]
            pool, _ = load_pool(self.store, tid, as_of=snapshot, **self.scope)
            migrated += int(self.sampler.advance(pool, group=tid))
        return migrated


def _completion_text(c) -> str:
    if isinstance(c, list):  # conversational: [{"role": "assistant", "content": ...}]
        return "".join(m.get("content") or "" for m in c if isinstance(m, dict))
    return str(c)


class SpeedupReward:
    """fn(prompts, completions, **kwargs) -> speedups; stores every attempt; rank 0 evaluates for all ranks."""

    __name__ = "speedup"

    def __init__(self, tasks, store, recipe, run: str, model_name: str, dataset: ContrastivePromptDataset):
        self.tasks = {t.key: t for t in tasks}
        self.store, self.recipe, self.run, self.model_name, self.ds = store, recipe, run, model_name, dataset
        self.svc = None
        if dist.is_main():
            from kernelrl.training.common import eval_service

            self.svc = eval_service(store, recipe.eval, recipe.gpus)
        self.eval_s = 0.0  # cumulative seconds inside the reward (store writes + evaluation)
        self.tokens = 0  # cumulative completion tokens scored (all ranks)
        self.per_step: dict[int, dict[str, Any]] = {}

    def close(self) -> None:
        if self.svc is not None:
            self.svc.close()

    def __call__(self, prompts, completions, completion_ids=None, task_key=None, snapshot=None,
                 exemplar_ids=None, slot=None, trainer_state=None, log_metric=None, island=None,
                 **kw) -> list[float]:
        t0 = time.monotonic()
        step = int(trainer_state.global_step) if trainer_state is not None else 0
        n_local = len(completions)
        local = []
        for j in range(n_local):
            ids = completion_ids[j] if completion_ids is not None else None
            local.append({"task_key": task_key[j], "text": _completion_text(completions[j]),
                          "snapshot": int(snapshot[j]), "exemplar_ids": json.loads(exemplar_ids[j]),
                          "slot": int(slot[j]), "ntok": len(ids) if ids is not None else None,
                          "prompt": prompts[j], "island": int(island[j]) if island is not None else -1})
        everything = dist.gather_objects(local)
        lens = dist.gather_objects([n_local])
        payload = None
        if dist.is_main():
            samples = [Sample(self.tasks[x["task_key"]], _Gen(x["text"], x["ntok"]), x["prompt"],
                              {"snapshot": x["snapshot"], "exemplar_ids": x["exemplar_ids"]}) for x in everything]
            # the slot and the position inside the step identify an attempt; the response hash (added by
            # evaluate_samples) tells a resumed step's identical generation from a new one
            backlog = queue_backlog(self.svc)  # jobs ahead of this step's (other stages, runs, re-verifications)
            results = evaluate_samples(self.store, self.svc, samples, stage="crl", run=self.run,
                                       model=self.model_name, key_prefix=f"{self.run}:crl:{step}")
            rewards = [reward_of(r) for r in results]
            stats = summarize(results)
            stats.update(queue_stats(results, backlog))
            assignments = [(x["task_key"], r.get("candidate_id"), x["island"]) for x, r in zip(everything, results)]
            payload = (rewards, stats, store_snapshot(self.store), assignments)
        rewards, stats, snap, assignments = dist.broadcast(payload)
        self.ds.as_of = max(self.ds.as_of or 0, snap)  # later prompts see this step's exemplars (same on every rank)
        migrated = self.ds.islands_round(assignments, snap)  # every rank: their island states stay identical
        dt = time.monotonic() - t0
        self.eval_s += dt
        ntoks = sum(x["ntok"] or 0 for x in everything)
        self.tokens += ntoks
        rec = self.per_step.setdefault(step, {"evaluation_s": 0.0, "completion_tokens": 0})
        rec.update({k: stats[k] for k in ("success_rate", "parsed_rate", "mean_speedup", "speedup_p25",
                                          "speedup_p50", "speedup_p75", "max_speedup")})
        rec["evaluation_s"] += dt
        rec["completion_tokens"] += ntoks
        for k in ("queue_backlog", "queue_depth", "jobs", "cache_hits"):  # summed over a step's reward calls
            rec[k] = rec.get(k, 0) + stats.get(k, 0)
        rec["snapshot"] = snap
        if migrated:
            rec["island_migrations"] = rec.get("island_migrations", 0) + migrated
        if log_metric is not None:
            for k in ("success_rate", "speedup_p25", "speedup_p50", "speedup_p75"):
                log_metric(f"kernelrl/{k}", float(stats[k]))
            log_metric("kernelrl/evaluation_s", dt)
        offset = sum(lens[: dist.rank()])
        return [float(x) for x in rewards[offset: offset + n_local]]


def queue_backlog(svc) -> int:
    """Unfinished jobs in the store's queue right now (queued, running, or waiting for a re-verification)."""
    from kernelrl.store.queue import PENDING

    counts = svc.queue.counts()
    return int(sum(counts.get(st, 0) for st in PENDING))


def queue_stats(results: list[dict[str, Any]], backlog: int) -> dict[str, int]:
    """A step's load on the evaluators: ``jobs`` evaluated for it (parsed completions), ``cache_hits`` answered from
    the store (the same source scored before, e.g. a memorised kernel), ``queue_depth`` the unfinished jobs its
    evaluation waited behind and for (the backlog at submission plus its own jobs that needed a worker)."""
    jobs = [r for r in results if "unparsed" not in (r.get("flags") or [])]
    hits = sum(1 for r in jobs if r.get("cached"))
    return {"jobs": len(jobs), "cache_hits": hits, "queue_backlog": backlog, "queue_depth": backlog + len(jobs) - hits}


class _Gen:
    def __init__(self, text: str, ntok: int | None):
        self.text, self.completion_tokens, self.prompt_tokens, self.error = text, ntok, None, None


def _build_args(recipe, out_dir: Path):
    from trl import GRPOConfig

    from kernelrl.training.tracking import report_to

    c = recipe.crl
    cuda = torch.cuda.is_available()
    world = dist.world_size()
    batch = c.group_size * c.prompts_per_step
    if batch % world:
        from kernelrl.errors import ConfigError

        raise ConfigError(f"crl: group_size * prompts_per_step = {batch} must divide by the {world} processes")
    kw: dict[str, Any] = {}
    if c.use_vllm:
        kw.update(use_vllm=True, vllm_mode=c.vllm_mode, vllm_gpu_memory_utilization=c.vllm_gpu_memory_utilization)
        if c.vllm_mode == "server" and c.vllm_server_url:
            kw["vllm_server_base_url"] = c.vllm_server_url
    return GRPOConfig(
        output_dir=str(out_dir / "trainer"), max_steps=c.steps, learning_rate=c.learning_rate,
        per_device_train_batch_size=batch // world, gradient_accumulation_steps=c.grad_accum,
        num_generations=c.group_size, num_iterations=c.num_iterations,
        max_completion_length=c.max_completion_length, temperature=c.temperature, top_p=1.0, beta=c.beta,
        epsilon=c.epsilon, loss_type="grpo",  # token-averaged per sequence, then over the group (the paper)
        scale_rewards="group",  # (r - mean) / std within the group
        logging_steps=1, save_steps=c.save_steps, save_total_limit=2, save_only_model=False,
        report_to=report_to(),
        bf16=cuda and recipe.model.dtype == "bfloat16", use_cpu=not cuda, seed=c.seed, data_seed=c.seed,
        shuffle_dataset=False, remove_unused_columns=False, disable_tqdm=True, dataloader_num_workers=0,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        gradient_checkpointing=c.gradient_checkpointing, **kw)


def train_crl(model_dir: str, tasks, store, recipe, run: str, out_dir: Path, progress=None) -> dict[str, Any]:
    """Run (or resume, or return the finished result of) GRPO; rank 0 gets the metrics.

    Long because: the trainer, its callbacks (closures over the reward, the dataset and the per-step timing) and
    the resume bookkeeping share state that would otherwise travel through half a dozen parameters."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from kernelrl.training.sft import torch_dtype, is_final, last_checkpoint, lora_config, write_final

    c = recipe.crl
    out_dir = Path(out_dir)
    final = out_dir / "final"
    metrics_path = out_dir / "crl-metrics.json"
    jsonl = out_dir / "metrics.jsonl"
    if is_final(final) and metrics_path.exists():
        return {"model_dir": str(final), "metrics": read_json(metrics_path), "metrics_log": str(jsonl)}
    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype(recipe.model.dtype))
    n_slots = c.steps * c.prompts_per_step * c.grad_accum
    ds = ContrastivePromptDataset(tasks, store, recipe, n_slots,
                                  token_counter=lambda s: len(tok(s, add_special_tokens=False)["input_ids"]),
                                  state_path=out_dir / "sampler-state.json", run=run)
    resume = last_checkpoint(out_dir / "trainer")
    saved = read_json(Path(resume) / STATE_FILE, {}) if resume else {}
    ds.as_of = dist.broadcast(int(saved.get("as_of") or (store_snapshot(store) if dist.is_main() else 0)))
    # the pool as crl began (kept across resumes): comparing policies on crl's starting prompts needs it, and the
    # slots' snapshots cannot give it (each is the newest evaluation in ITS task's pool, not the store's)
    start_snapshot = int(saved.get("start_snapshot") or ds.as_of)
    reward = SpeedupReward(tasks, store, recipe, run, str(model_dir), ds)
    from kernelrl.training.policy import describe_pool, device_scope

    # the pool counts only speedups measured on the device type the service times on (rank 0 has the service)
    dtype, kind = dist.broadcast(device_scope(recipe.eval, reward.svc) if dist.is_main() else None)
    ds.scope.update(device_type=dtype, device_kind=kind)
    timing = {"generation_s": 0.0, "evaluation_s": 0.0, "update_s": 0.0}
    gen_box = {"s": 0.0}
    steps_total = c.steps

    class Metrics(TrainerCallback):
        """Time split per step, our reward statistics merged into trl's log line, JSONL + progress."""

        def on_step_begin(self, args, state, control, **kw):
            self.t0, self.e0, self.g0 = time.monotonic(), reward.eval_s, gen_box["s"]

        def on_step_end(self, args, state, control, **kw):
            total = time.monotonic() - self.t0
            ev = reward.eval_s - self.e0
            gen_and_score = gen_box["s"] - self.g0
            rec = reward.per_step.setdefault(state.global_step - 1, {})
            rec.update(generation_s=round(max(gen_and_score - ev, 0.0), 3), evaluation_s=round(ev, 3),
                       update_s=round(max(total - gen_and_score, 0.0), 3), step_s=round(total, 3))
            toks = rec.get("completion_tokens") or 0
            rec["tokens_per_s"] = round(toks / rec["generation_s"], 1) if rec["generation_s"] > 0 else None
            timing["generation_s"] += rec["generation_s"]
            timing["evaluation_s"] += rec["evaluation_s"]
            timing["update_s"] += rec["update_s"]

        def on_log(self, args, state, control, logs=None, **kw):
            if not dist.is_main() or not logs or "reward" not in logs:
                return
            rec = reward.per_step.get(state.global_step - 1, {})
            line = {"step": state.global_step, **{k: logs[k] for k in ("reward", "reward_std", "kl", "loss",
                                                                         "completions/mean_length",
                                                                         "frac_reward_zero_std") if k in logs},
                    **{k: v for k, v in rec.items()}}
            with open(jsonl, "a") as f:
                f.write(json.dumps(line, default=str) + "\n")

        def on_save(self, args, state, control, **kw):
            if not dist.is_main():
                return
            ck = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if ck.exists():
                st = {"as_of": ds.as_of, "start_snapshot": start_snapshot, "global_step": state.global_step,
                      "slots_built": len(ds.slots)}
                if hasattr(ds.sampler, "state_dict"):
                    st["sampler"] = ds.sampler.state_dict()
                atomic_json(ck / STATE_FILE, st)

    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=_build_args(recipe, out_dir),
                          train_dataset=ds.hf_dataset(), processing_class=tok, callbacks=[Metrics()],
                          peft_config=lora_config(c.lora_r, c.lora_alpha) if c.lora else None)
    from kernelrl.training.tracking import attach_tracking

    # console lines: trl's reward/loss plus our success rate and time split of that step (set in on_step_end)
    attach_tracking(trainer, out_dir, label="crl", total_steps=steps_total, progress=progress, span=(0.0, 0.95),
                    extra=lambda step: {k: v for k, v in reward.per_step.get(step - 1, {}).items()
                                        if k in ("success_rate", "mean_speedup", "generation_s", "evaluation_s",
                                                 "update_s", "tokens_per_s")})
    trainer.data_collator = ds.collate  # slot ids -> prompts built from the store as batches are drawn
    if saved.get("sampler") and hasattr(ds.sampler, "load_state_dict"):
        ds.sampler.load_state_dict(saved["sampler"])
    orig = trainer._generate_and_score_completions

    def timed(*a, **k):  # generation + reward (evaluation); the reward's own time is subtracted per step
        t = time.monotonic()
        try:
            return orig(*a, **k)
        finally:
            gen_box["s"] += time.monotonic() - t

    trainer._generate_and_score_completions = timed
    if resume:
        log.info("crl: resuming from %s (snapshot %s)", resume, ds.as_of)
        # steps re-run after the checkpoint append their lines again: keep the log to the checkpoint's steps
        if dist.is_main() and jsonl.exists():
            done = int(Path(resume).name.split("-")[-1])
            keep = [ln for ln in jsonl.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= done]
            jsonl.write_text("".join(ln + "\n" for ln in keep))
    t0 = time.monotonic()
    try:
        trainer.train(resume_from_checkpoint=resume)
    finally:
        reward.close()
    wall = time.monotonic() - t0
    final = write_final(trainer, model_dir, tok, out_dir, lora=c.lora, dtype=recipe.model.dtype,
                        extra={"steps": trainer.state.global_step, "resumed_from": resume})
    if not dist.is_main():
        return {"model_dir": str(final), "metrics": {}}
    lines = [json.loads(ln) for ln in jsonl.read_text().splitlines() if ln.strip()] if jsonl.exists() else []
    rewards = [ln.get("reward", 0.0) for ln in lines]
    q = quantiles([ln.get("speedup_p50", 0.0) for ln in lines])
    tok_total = sum(ln.get("completion_tokens") or 0 for ln in lines)
    gen_total = sum(ln.get("generation_s") or 0 for ln in lines)
    metrics = {
        "steps": trainer.state.global_step, "resumed_from": resume, "wall_s": round(wall, 2),
        "reward_mean_first": rewards[0] if rewards else None, "reward_mean_last": rewards[-1] if rewards else None,
        "reward_mean_per_step": [round(x, 4) for x in rewards],
        "reward_std_per_step": [round(ln.get("reward_std", 0.0), 4) for ln in lines],
        "success_rate_per_step": [ln.get("success_rate") for ln in lines],
        "median_speedup_quantiles_over_steps": [round(x, 4) for x in q],
        "tokens_per_s": round(tok_total / gen_total, 1) if gen_total else None,
        "timing": {k: round(sum(ln.get(k) or 0.0 for ln in lines), 2) for k in timing},  # all steps, resumes too
        "snapshots": sorted({s["snapshot"] for s in ds.slots.values()}),
        "start_snapshot": start_snapshot,  # the store's newest evaluation as crl began (policy:...@crl-start)
        "final_snapshot": store_snapshot(store),  # the pool as training ended: what a later policy eval draws from
        "prompts_built": len(ds.slots),
        "prompt": c.prompt, "pool": describe_pool(ds.scope), "pool_scope": dict(ds.scope),
        "sampler": {"kind": c.sampler.kind, "n_exemplars": c.sampler.n_exemplars},
        "seeds": {"recipe": recipe.seed, "crl": c.seed},
    }
    if hasattr(ds.sampler, "groups"):  # island sampler: rounds, migrations and sizes per task
        metrics["islands"] = {str(g): {"rounds": st["round"], "migrations": st["migrations"],
                                       "sizes": [len(i) for i in st["islands"]]} for g, st in ds.sampler.groups.items()}
    atomic_json(metrics_path, metrics)
    return {"model_dir": str(final), "metrics": metrics, "metrics_log": str(jsonl)}


def prompt_digest(messages: list[dict]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]
