"""How the local runner starts a step on a GPU host: the recipe's GPU roles (``kernelrl.config.gpus``) become the
step's ``CUDA_VISIBLE_DEVICES``, ``KERNELRL_EVAL_LOCAL_WORKERS=0`` when evaluator GPUs exist, and an
``accelerate launch`` prefix (one process per training GPU) for the data-parallel stages.

    plan = plan_for("gpu-smoke", {"gpus.train": "[0, 1]"})          # None for a recipe without gpus:
    launch_prefix(plan, "crl", python, recipe_obj)   # [python, -m, accelerate.commands.launch, --num_processes, 2, ...]
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelrl.config.gpus import GpuPlan
from kernelrl.errors import ConfigError
from kernelrl.training.dist import check_step_batch

# accelerate's built-in defaults for one host when the recipe gives no config file: plain DDP, no mixed precision
# (the recipe's model.dtype already decides the weights' dtype), no torch.compile.
DDP_DEFAULTS = ("--multi_gpu", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no")


def recipe_of(recipe: str, overrides: Mapping[str, Any] | None):
    from kernelrl.config.recipes import load_recipe
    from kernelrl.step import load_overrides

    return load_recipe(recipe, load_overrides(dict(overrides or {})))


def plan_for(recipe: str, overrides: Mapping[str, Any] | None, *, visible: int | None = None) -> GpuPlan | None:
    """The GPU plan of a recipe (with the run's ``--set`` overrides), None when it names no GPUs."""
    return GpuPlan.from_recipe(recipe_of(recipe, overrides).gpus, visible=visible)


def free_port() -> int:
    """A free TCP port on the loopback for the launcher's rendezvous: two DP stages (or two runs) on one host
    must not share accelerate's default 29500."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_prefix(plan: GpuPlan | None, stage: str, python: str, recipe_obj=None) -> list[str] | None:
    """``[python, -m, accelerate.commands.launch, ...]`` when the stage runs one process per training GPU, else
    None (a plain ``python -m``). The recipe's ``accelerate:`` section may name a ``config_file`` (FSDP, ZeRO) and
    ``mixed_precision``; its ``num_processes``, when given, must equal the training GPUs."""
    if plan is None or plan.processes(stage) < 2:
        return None
    n = plan.processes(stage)
    acc = dict(getattr(recipe_obj, "accelerate", None) or {})
    if acc.get("num_processes") not in (None, n):
        raise ConfigError(f"accelerate.num_processes is {acc['num_processes']} but gpus.train names {n} GPUs: one "
                          "process per training GPU")
    b = getattr(getattr(recipe_obj, "sft", None), "batch_size", None)
    if stage == "sft" and isinstance(b, int):  # before any launch: the step's own check would come per process
        check_step_batch(b, n)
    args = [python, "-m", "accelerate.commands.launch", "--num_processes", str(n),
            "--main_process_port", str(free_port())]
    if acc.get("config_file"):
        cfg = Path(acc["config_file"])
        if not cfg.exists():
            raise ConfigError(f"accelerate.config_file {cfg}: not found")
        args += ["--config_file", str(cfg)]
    else:
        args += list(DDP_DEFAULTS)
        if acc.get("mixed_precision"):
            i = args.index("--mixed_precision")
            args[i + 1] = str(acc["mixed_precision"])
    return args
