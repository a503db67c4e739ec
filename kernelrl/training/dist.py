"""Process-group helpers: the same step code runs as one CPU process or under ``accelerate launch``.

Rank and world size come from the environment accelerate/torchrun set (RANK, WORLD_SIZE, LOCAL_RANK), so they
are known before any trainer exists. Only the main process (rank 0) writes store rows, checkpoints and
manifests; the others train with it and wait.
"""

from __future__ import annotations

import os
from typing import Any


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main() -> bool:
    return rank() == 0


def distributed() -> bool:
    return world_size() > 1


def check_step_batch(batch: int, world: int) -> None:
    """sft.batch_size is the batch of one step, split over the training processes (sft.data_parallel_rows):
    refused when ``world`` processes cannot split it evenly."""
    if world > 1 and batch % world:
        from kernelrl.errors import ConfigError

        raise ConfigError(f"sft.batch_size={batch} is the batch of one step, split over the {world} training "
                          f"processes (gpus.train): it must be a multiple of {world}")


def _pg():
    """The default process group, initialised from the launcher's environment if nothing has yet (NCCL on GPUs,
    gloo on CPU: the backends accelerate itself picks, so its Accelerator later reuses this group)."""
    import torch
    import torch.distributed as tdist

    if not tdist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank())
            tdist.init_process_group(backend="nccl")
        else:
            tdist.init_process_group(backend="gloo")
    return tdist


def barrier() -> None:
    """Wait for every process (no-op in a single process)."""
    if not distributed():
        return
    import torch

    tdist = _pg()
    if torch.cuda.is_available():
        tdist.barrier(device_ids=[local_rank()])
    else:
        tdist.barrier()


def broadcast(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (pickled; no-op in a single process)."""
    if not distributed():
        return obj
    box = [obj]
    _pg().broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(items: list) -> list:
    """Every rank's list concatenated in rank order, on every rank (no-op in a single process)."""
    if not distributed():
        return list(items)
    tdist = _pg()
    out: list = [None] * world_size()
    tdist.all_gather_object(out, list(items))
    return [x for part in out for x in part]


def run_stage(stage: str, body, argv: list[str] | None = None, description: str = "") -> int:
    """``kernelrl.step.run_step`` on the main process; on the other ranks of an ``accelerate launch`` the same
    body runs with the same context but writes no stage record and no manifest (the body itself leaves store
    writes and checkpoint syncs to rank 0 and waits for it)."""
    from kernelrl.step import run_step

    if not distributed() or is_main():
        return run_step(stage, body, argv, description)
    import logging
    from pathlib import Path

    from kernelrl.config.recipes import load_recipe
    from kernelrl.config.settings import load_settings
    from kernelrl.step import StepContext, parse_sets, step_parser

    args = step_parser(stage, description).parse_args(argv)
    settings = load_settings()
    logging.basicConfig(level="WARNING", format=f"%(asctime)s {stage}[rank {rank()}] %(levelname)s %(message)s")
    recipe = load_recipe(args.recipe, parse_sets(args.set))
    ctx = StepContext(stage=stage, run=args.run, recipe=recipe, settings=settings,
                      manifest_out=Path(args.manifest_out or "/dev/null"), dry_run=args.dry_run)
    body(ctx)
    return 0
