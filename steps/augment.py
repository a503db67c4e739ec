"""Stage 1a, augmentation: ask each teacher for faster implementations of every task; evaluate; store all.

    python -m steps.augment --recipe smoke --run NAME [--set augment.max_trials=5] [--set task_limit=2] [--dry-run]

Teachers (``augment.teachers``): 'seed-corpus' (offline stand-in: the task's seed files in a fixed order), an
OpenAI-compatible 'https://host/v1#model', 'vllm:MODEL' or a local HF model. Up to ``augment.max_trials``
attempts per task and teacher, stopping after ``augment.target_successes`` successes. Every attempt is stored
(idempotent keys: a re-run after a crash continues where it stopped). Library: kernelrl/training/augment.py.

Manifest metrics: attempts, successes, success_rate, per_task {attempts, successes}, speedup statistics.
"""

from __future__ import annotations

import sys

from kernelrl.step import run_step, stage_body

if __name__ == "__main__":
    sys.exit(run_step("augment", stage_body("augment"), description=__doc__))
