"""Stage 3, contrastive RL: GRPO with contrastive prompts from the exemplar store, speedup as reward.

    python -m steps.crl --recipe smoke --run NAME [--set crl.steps=4] [--dry-run]
    accelerate launch --num_processes 2 -m steps.crl --recipe R --run NAME      # data-parallel

trl GRPOTrainer; each prompt is built from the store when the trainer first asks for it (the recipe's exemplar
sampler over this task's successful candidates, snapshot id recorded) and frozen, so the G samples of a group
see the identical prompt. The reward parses each completion, evaluates the code through the evaluation service
and returns its speedup (0 when unparseable, unsuccessful or flagged); every attempt is stored with its
snapshot and exemplar ids, and every success becomes an exemplar for later prompts. Group size, clip epsilon,
KL beta, temperature, max completion length, vLLM (colocate/server) come from ``crl.*``. Checkpoints every
``crl.save_steps`` (trainer state, optimizer, RNG; our prompt/snapshot state beside them): a killed run resumes.
Per-step metrics (reward mean/std, success rate, speedup quantiles, tokens/s, generation/evaluation/update
seconds) go to ``<work dir>/metrics.jsonl``. Library: kernelrl/training/crl.py.

Manifest outputs: checkpoint, model_dir, metrics_log. Metrics: training summary, final policy numbers.
"""

from __future__ import annotations

import sys

from kernelrl.step import stage_body
from kernelrl.training.dist import run_stage

if __name__ == "__main__":
    sys.exit(run_stage("crl", stage_body("crl"), description=__doc__))
