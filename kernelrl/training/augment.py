"""Stage 1a, augmentation: teachers answer the one-shot prompt for every task; every answer is stored and evaluated.

    metrics = run_augment(store, recipe, run="r1", settings=settings)

Per task and teacher: up to ``augment.max_trials`` attempts, stopping after ``augment.target_successes``
successes (the paper: 20 and 2). Teachers:

- ``seed-corpus``: the offline stand-in. Its "answers" are the task's seed files (``kernelrl.tasks.load_seeds``)
  in a fixed order (faster, wrong, slower, then the rest; by name within a kind), without their
  ``# kernelrl-seed`` metadata header (a teacher does not announce whether it is right). Seeds marked for CUDA
  are used only when the evaluation device is a GPU.
- anything else goes through ``kernelrl.llm.backends.make_backend`` (an OpenAI-compatible URL#model, vllm:ID,
  a local HF path) with the augmentation prompt, one sample per trial, seeded by the trial index.

Resumable: a trial's attempt has a deterministic dedup key and evaluations are answered from the store, so a
re-run after a crash replays finished trials from the store (the seed-corpus teacher and seeded local models
are deterministic) and continues where it stopped.
"""

from __future__ import annotations

import logging
from typing import Any

from kernelrl.training.common import Sample, eval_service, evaluate_samples, is_success, recipe_tasks, summarize

log = logging.getLogger("kernelrl.training.augment")
SEED_ORDER = {"faster": 0, "wrong": 1, "slower": 2}


def strip_seed_header(source: str) -> str:
    """A seed file without its ``# kernelrl-seed`` header lines (the code a teacher would have written)."""
    from kernelrl.tasks.seeds import HEADER_KEYS

    lines = source.splitlines(keepends=True)
    if lines and lines[0].strip() == "# kernelrl-seed":
        n = 1
        while n < len(lines) and n <= len(HEADER_KEYS) and lines[n].startswith("# "):
            n += 1
        lines = lines[n:]
    return "".join(lines).lstrip("\n")


def seed_answers(task, device: str) -> list[str]:
    """The seed-corpus teacher's answers for a task, in trial order."""
    from kernelrl.tasks import load_seeds

    seeds = [s for s in load_seeds(task) if s.device == "any" or device.startswith("cuda")]
    seeds.sort(key=lambda s: (SEED_ORDER.get(s.expect, 9), s.name))
    return [strip_seed_header(s.source) for s in seeds]


class _Answer:
    def __init__(self, text: str):
        self.text, self.prompt_tokens, self.completion_tokens, self.error = text, None, None, None


def run_augment(store, recipe, run: str, settings=None, progress=None) -> dict[str, Any]:
    """Ask every teacher about every task; returns the stage metrics (attempts, successes per task, rates)."""
    from kernelrl.llm.prompts import build_augment_messages

    a = recipe.augment
    tasks = recipe_tasks(recipe, settings)
    per_task: dict[str, dict[str, Any]] = {}
    all_results: list[dict] = []
    teachers_down: dict[str, str] = {}
    with eval_service(store, recipe.eval, recipe.gpus) as svc:
        for teacher in a.teachers:
            failures_in_a_row = 0
            backend = None
            if teacher != "seed-corpus":
                from kernelrl.llm.backends import make_backend

                backend = make_backend(teacher, timeout_s=a.request_timeout_s, max_retries=a.max_retries,
                                       backoff_s=a.retry_backoff_s)  # ignored by non-HTTP backends
            for ti, task in enumerate(tasks):
                if teacher in teachers_down:
                    break
                msgs = build_augment_messages(task)
                answers = seed_answers(task, svc.device) if backend is None else None
                successes = attempts = 0
                while attempts < a.max_trials and successes < a.target_successes:
                    if backend is None:
                        if attempts >= len(answers):
                            break
                        gen = _Answer(f"```python\n{answers[attempts]}```")
                    else:
                        gen = backend.generate([msgs], n=1, max_tokens=a.max_new_tokens, temperature=a.temperature,
                                               seed=attempts)[0][0]
                    [res] = evaluate_samples(store, svc, [Sample(task, gen, msgs)], stage="augment", run=run,
                                             model=teacher, key_prefix=f"{run}:augment:{teacher}:{task.key}:{attempts}")
                    attempts += 1
                    successes += int(is_success(res))
                    all_results.append(res)
                    failures_in_a_row = failures_in_a_row + 1 if gen.error else 0
                    if a.teacher_failure_limit and failures_in_a_row >= a.teacher_failure_limit:
                        teachers_down[teacher] = (f"{failures_in_a_row} trials in a row failed at the endpoint "
                                                  f"(last: {gen.error}); skipped from task {task.key} on")
                        log.warning("augment: teacher %s taken as down: %s", teacher, teachers_down[teacher])
                        break
                d = per_task.setdefault(task.key, {"attempts": 0, "successes": 0})
                d["attempts"] += attempts
                d["successes"] += successes
                log.info("augment %s %s: %d attempts, %d successes", teacher, task.key, attempts, successes)
                if progress:
                    progress((ti + 1) / len(tasks), f"augment {teacher} {task.key}")
    m = summarize(all_results)
    m.update(attempts=len(all_results), successes=sum(d["successes"] for d in per_task.values()),
             tasks=len(tasks), tasks_with_success=sum(1 for d in per_task.values() if d["successes"]),
             teachers=list(a.teachers), per_task=per_task, teachers_down=teachers_down)
    return m
