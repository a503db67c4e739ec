"""The training stages of CUDA-L1 as library code; ``steps/<stage>.py`` are thin entrypoints around these.

- ``augment``: teachers (or the offline seed corpus) answer the one-shot prompt; every answer stored + evaluated.
- ``sft``: trl SFTTrainer on (augmentation prompt -> successful code), completion-only loss, LoRA or full.
- ``selfsup``: sample -> evaluate -> keep successes -> SFT on them (REINFORCE with 0/1 reward, no baseline).
- ``crl``: trl GRPOTrainer with contrastive prompts rebuilt from the exemplar store, speedup reward.
- ``common``: task selection, attempt recording + evaluation, summaries, the shared policy evaluation.
- ``dist``: rank helpers so the same code runs in one process or under ``accelerate launch``.
"""
