"""Stage 2, the self-supervised loop: generate -> evaluate -> keep the successes -> train on them.

    python -m steps.selfsup --recipe smoke --run NAME [--set selfsup.iterations=1] [--dry-run]

REINFORCE with reward 1/0 and no baseline is exactly supervised training on the successful samples, which is
what each iteration does (speed is ignored in this stage, as in the paper): ``selfsup.samples_per_task``
samples per task with the current policy (augmentation prompt, ``selfsup.temperature``), every one stored as an
attempt and evaluated, then SFT (``selfsup.sft``) on the successes. One checkpoint per iteration
(``runs/<run>/selfsup/iter-<i>``); ``state.json`` in the work dir, written atomically after each iteration,
makes a killed run resume at the next unfinished one (the unfinished one's trainer resumes from its own
checkpoints). Library: kernelrl/training/stages.py (run_selfsup).

Manifest outputs: model_dir, checkpoint. Metrics: per-iteration success rate and counts, final policy numbers.
"""

from __future__ import annotations

import sys

from kernelrl.step import stage_body
from kernelrl.training.dist import run_stage

if __name__ == "__main__":
    sys.exit(run_stage("selfsup", stage_body("selfsup"), description=__doc__))
