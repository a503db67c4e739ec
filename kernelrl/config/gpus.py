"""GPU roles of a recipe (its ``gpus:`` section) and what each step process gets on one host.

    plan = GpuPlan.from_recipe({"train": [0], "evaluate": "rest"}, visible=4)
    plan.evaluate                 # [1, 2, 3]: one `kernelrl worker --device cuda:N` each (flows/fleet.py)
    plan.stage_env("crl")         # {"CUDA_VISIBLE_DEVICES": "0", "KERNELRL_EVAL_LOCAL_WORKERS": "0"}
    plan.processes("crl")         # 1; 2 with train: [0, 1] (accelerate launch, one process per GPU)

Roles (indices are positions among the GPUs the pipeline process sees, as ``cuda:N`` numbers them):
- ``train``: the policy's GPUs. sft and crl run one process per training GPU (``DP_STAGES``, accelerate); every
  other stage process sees the first of them (selfsup samples and trains there; augment and bench only submit
  evaluation jobs).
- ``generate``: optional GPUs for generation servers (a vLLM server; augment's local teacher). Default: none.
- ``evaluate``: the evaluator GPUs: one worker process per GPU pulls jobs from the store's queue. ``rest`` means
  every visible GPU that no other role names.

The dedicated-GPU rule: an evaluator GPU is never a training or generation GPU (kernel timing beside training
measures the trainer, not the kernel), and when a recipe names evaluator GPUs the stage processes run no
evaluation worker of their own (``KERNELRL_EVAL_LOCAL_WORKERS=0``; ``kernelrl.training.common.eval_service``
refuses a conflicting setting). A recipe without ``gpus:`` keeps the embedded default: one in-process worker on
whatever device the recipe's ``eval.device`` names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from kernelrl.config.devices import cuda_device_count
from kernelrl.errors import ConfigError

ROLES = ("train", "generate", "evaluate")
# Which role's GPUs a stage's process sees. bench is "train": with a fleet it only submits jobs and waits, and its
# evaluation service needs a visible GPU of the evaluators' type to name the device type it caches under.
STAGE_ROLE = {"augment": "train", "sft": "train", "selfsup": "train", "crl": "train", "bench": "train"}
# Stages that run one process per training GPU under accelerate when there are several. selfsup stays one
# process: its sampling and short SFT rounds are not what the run waits on, and its loop is not DP-tested.
DP_STAGES = ("sft", "crl")
LOCAL_WORKERS_ENV = "KERNELRL_EVAL_LOCAL_WORKERS"


def visible_gpus() -> int:
    """How many CUDA devices this process sees (0 without torch or a driver)."""
    return cuda_device_count()


def _indices(role: str, value: Any) -> list[int] | str:
    if value == "rest":
        if role != "evaluate":
            raise ConfigError(f"gpus.{role}: 'rest' is only for evaluate (the GPUs no other role names)")
        return "rest"
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                               for i in value):
        raise ConfigError(f"gpus.{role}: expected a list of GPU indices (e.g. [0, 1]) or 'rest', got {value!r}")
    if len(set(value)) != len(value):
        raise ConfigError(f"gpus.{role}: a GPU is listed twice in {value!r}")
    return list(value)


@dataclass(frozen=True)
class GpuPlan:
    """Resolved GPU roles (indices among the visible GPUs) and the physical ids the children get."""

    train: list[int] = field(default_factory=list)
    generate: list[int] = field(default_factory=list)
    evaluate: list[int] = field(default_factory=list)
    physical: list[str] = field(default_factory=list)  # visible index -> what CUDA_VISIBLE_DEVICES names it

    @classmethod
    def from_recipe(cls, gpus: dict[str, Any] | None, visible: int | None = None,
                    parent_visible: str | None = None) -> GpuPlan | None:
        """The plan of a recipe's ``gpus:`` mapping, or None when it names no GPUs. ``visible``: GPUs this host
        shows (default: asked of torch); ``parent_visible``: this process's CUDA_VISIBLE_DEVICES (default: the
        environment's), so role indices map to the ids a child must be given. ConfigError on any rule broken."""
        if not gpus:
            return None
        if not isinstance(gpus, dict):
            raise ConfigError(f"gpus: expected a mapping of roles ({', '.join(ROLES)}), got {gpus!r}")
        unknown = sorted(set(gpus) - set(ROLES))
        if unknown:
            raise ConfigError(f"gpus.{unknown[0]}: unknown role (roles: {', '.join(ROLES)})")
        roles = {r: _indices(r, gpus.get(r, [])) for r in ROLES}
        if not roles["train"]:
            raise ConfigError("gpus.train: a recipe that names GPUs must name the policy's (e.g. train: [0])")
        visible = visible_gpus() if visible is None else int(visible)
        for r in ROLES:
            bad = [i for i in roles[r] if i >= visible] if roles[r] != "rest" else []
            if bad:
                raise ConfigError(f"gpus.{r}: GPU {bad[0]} does not exist (this host shows {visible} GPU"
                                  f"{'' if visible == 1 else 's'})")
        named = [i for r in ("train", "generate") for i in roles[r]]
        if roles["evaluate"] == "rest":
            roles["evaluate"] = [i for i in range(visible) if i not in named]
            if not roles["evaluate"]:
                raise ConfigError(f"gpus.evaluate: 'rest' leaves no GPU (this host has {visible}, the other roles "
                                  f"take {sorted(set(named))})")
        both = sorted(set(roles["evaluate"]) & set(named))
        if both:
            raise ConfigError(f"gpus: GPU {both[0]} is both an evaluator and a train/generate GPU; kernel timing needs "
                              "dedicated GPUs (timing beside training measures the trainer)")
        if parent_visible is None:
            parent_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = [x.strip() for x in parent_visible.split(",")] if parent_visible else [str(i) for i in range(visible)]
        if len(ids) < visible:
            ids += [str(i) for i in range(len(ids), visible)]
        return cls(train=roles["train"], generate=roles["generate"], evaluate=roles["evaluate"], physical=ids)

    def ids(self, indices: list[int]) -> str:
        return ",".join(self.physical[i] for i in indices)

    def role_of(self, stage: str) -> list[int]:
        return getattr(self, STAGE_ROLE.get(stage, "train"))

    def processes(self, stage: str) -> int:
        """Processes the stage runs as: one per training GPU for DP_STAGES, else 1."""
        return len(self.train) if stage in DP_STAGES else 1

    def stage_env(self, stage: str) -> dict[str, str]:
        """What a stage's process must have in its environment: only its GPUs visible (a data-parallel stage all of
        its role's, any other stage the first: transformers' Trainer wraps a model in nn.DataParallel when one
        process sees several GPUs, which trl's SFTTrainer refuses; selfsup died so on the H100 x4), and no
        in-process evaluation worker when evaluator GPUs exist."""
        env = {"CUDA_VISIBLE_DEVICES": self.ids(self.role_of(stage)[: self.processes(stage)])}
        if self.evaluate:
            env[LOCAL_WORKERS_ENV] = "0"
        return env

    def to_dict(self) -> dict[str, Any]:
        return {"train": self.train, "generate": self.generate, "evaluate": self.evaluate,
                "physical": {r: self.ids(getattr(self, r)) for r in ROLES}}


def local_eval_workers(gpus: dict[str, Any] | None, environ: dict[str, str] | None = None) -> int:
    """In-process evaluation workers a stage process may run: ``KERNELRL_EVAL_LOCAL_WORKERS`` (default 1), and 0
    whenever the recipe names evaluator GPUs. An explicit non-zero setting beside evaluator GPUs is a ConfigError:
    that worker would time kernels on a training GPU."""
    environ = os.environ if environ is None else environ
    raw = environ.get(LOCAL_WORKERS_ENV)
    try:
        n = int(raw) if raw not in (None, "") else None
    except ValueError:
        raise ConfigError(f"{LOCAL_WORKERS_ENV} must be an integer, got {raw!r}") from None
    if n is not None and n < 0:
        raise ConfigError(f"{LOCAL_WORKERS_ENV} must be >= 0, got {n}")
    evaluators = (gpus or {}).get("evaluate") if isinstance(gpus, dict) else None
    if evaluators:
        if n:
            raise ConfigError(f"{LOCAL_WORKERS_ENV}={n} but the recipe names evaluator GPUs ({evaluators}): kernels "
                              "are timed on dedicated GPUs only; unset it (or 0) and start `kernelrl workers up`")
        return 0
    return 1 if n is None else n
