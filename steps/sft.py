"""Stage 1b, supervised fine-tuning on the successful augmentation snippets of this run.

    python -m steps.sft --recipe smoke --run NAME [--set sft.epochs=1] [--dry-run]
    accelerate launch --num_processes 2 -m steps.sft --recipe R --run NAME      # data-parallel (DDP/FSDP)

trl SFTTrainer on (augmentation prompt -> successful code), loss on the completion only; LoRA or full by
``sft.lora``; checkpoints every ``sft.save_steps`` (a killed run resumes from the newest); the final model in
HF format goes to the checkpoint store as ``runs/<run>/sft/final``. Ends by sampling the new policy
(``sft.eval_samples_per_task`` per task) and evaluating it. Library: kernelrl/training/sft.py, stages.py.

Manifest outputs: checkpoint (URI), model_dir (local). Metrics: pairs, losses, success_rate, speedups.
"""

from __future__ import annotations

import sys

from kernelrl.step import stage_body
from kernelrl.training.dist import run_stage

if __name__ == "__main__":
    sys.exit(run_stage("sft", stage_body("sft"), description=__doc__))
