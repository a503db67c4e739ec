"""Named recipes: a YAML file per recipe under ``recipes/`` (kept apart from the library), or any path.

A recipe names a task suite and fills the stage dataclasses of ``kernelrl.config.stages``. Unknown keys and
wrongly typed values fail at load time with a message naming the field (``recipe smoke: sft.epochs: expected
float, got 'three'``).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kernelrl.config.stages import (
    AugmentConfig,
    BenchConfig,
    CRLConfig,
    EvalConfig,
    ModelConfig,
    SelfSupConfig,
    SFTConfig,
    REMOVED_EVAL_KNOBS,
    knob,
)
from kernelrl.errors import ConfigError


def recipes_dir() -> Path:
    """Where named recipes live: $KERNELRL_RECIPES_DIR, else the repository's recipes/ folder."""
    env = os.environ.get("KERNELRL_RECIPES_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "recipes"


@dataclass
class Recipe:
    name: str = knob("custom", help="Recipe name (file stem for named recipes).")
    description: str = knob("", help="What this recipe is for.")
    suite: str = knob("builtin", help="Task suite: builtin, a KernelBench checkout dir, or a .py task file.")
    levels: list = knob([1, 2, 3], help="Levels of the suite the training stages use (augment, sft, selfsup, "
                        "crl); the bench stage scores `bench.levels`.")
    task_limit: int = knob(0, help="Use at most this many tasks (0 = all); for quick runs.")
    seed: int = knob(0, help="Global seed.")
    model: ModelConfig = field(default_factory=ModelConfig, metadata={"help": "Policy model."})
    eval: EvalConfig = field(default_factory=EvalConfig, metadata={"help": "Evaluator settings."})
    augment: AugmentConfig = field(default_factory=AugmentConfig, metadata={"help": "Stage 1a: augmentation."})
    sft: SFTConfig = field(default_factory=SFTConfig, metadata={"help": "Stage 1b: supervised fine-tuning."})
    selfsup: SelfSupConfig = field(default_factory=SelfSupConfig, metadata={"help": "Stage 2: self-supervised loop."})
    crl: CRLConfig = field(default_factory=CRLConfig, metadata={"help": "Stage 3: contrastive RL (GRPO)."})
    bench: BenchConfig = field(default_factory=BenchConfig, metadata={"help": "Final benchmark."})
    accelerate: dict = knob({}, help="accelerate launch settings for multi-GPU recipes (num_processes, fsdp ...).")
    gpus: dict = knob({}, help="GPU roles on the node, e.g. {train: [0..5], generate: [6], evaluate: [7]}.")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        """Content hash of the recipe's values: part of every stage's cache key."""
        blob = json.dumps(self.to_dict(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check (and gently coerce: int -> float) a YAML value against a dataclass field type."""
    if isinstance(tp, str):
        tp = eval(tp, vars(typing) | {"list": list, "dict": dict})  # annotations are strings (__future__)
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return _build(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: {value!r} does not match {tp}")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected float, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected int, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if tp is list or origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return value
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return value
    return value


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    moved = [k for k in unknown if k in MOVED.get(cls.__name__, {})]
    if moved:
        raise ConfigError(f"{where}.{moved[0]} moved to {MOVED[cls.__name__][moved[0]]} (one home per meaning): "
                          "set it there")
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.0)
        hint = f"closest: {close[0]}" if close else "no fields"
        if cls is EvalConfig and name in REMOVED_EVAL_KNOBS:
            raise ConfigError(f"{where}.{name}: no longer a knob ({REMOVED_EVAL_KNOBS[name]}, issue 34); {hint} "
                              f"(public: {', '.join(sorted(names))})")
        raise ConfigError(f"{where}.{name}: unknown field ({hint}; known: {', '.join(sorted(names))})")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    obj = cls(**kwargs)
    validate_values(obj, where)
    return obj


# Fields that moved: a recipe that still sets one gets told where it lives now.
MOVED = {"EvalConfig": {"final_budget_s": "bench.budget_s", "final_correctness_trials": "bench.correctness_trials"}}

_POSITIVE = {
    "budget_s", "correctness_trials", "max_trials", "target_successes", "epochs", "learning_rate",
    "batch_size", "grad_accum", "max_length", "iterations", "samples_per_task", "steps", "group_size",
    "prompts_per_step", "max_completion_length", "max_new_tokens", "bucket_width", "temperature",
    "timeout_factor", "max_wall_s", "memory_limit_mb", "max_prompt_tokens", "save_steps", "n_islands",
    "request_timeout_s",
}


# Knobs with a fixed set of values (issue 31: pools, prompt formats, the bench's policy row).
CHOICES: dict[str, tuple[str, ...]] = {
    "pool": ("run", "store"),
    "prompt": ("contrastive", "plain"),
    "eval_prompt": ("own", "augment", "contrastive", "both"),
    "policy_prompt": ("own", "augment", "contrastive", "both"),
    "policy_stage": ("auto", "crl", "selfsup", "sft", "none"),
}


def validate_values(obj: Any, where: str) -> None:
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if f.name in _POSITIVE and isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0:
            raise ConfigError(f"{where}.{f.name}: must be > 0, got {v!r}")
    if isinstance(obj, CRLConfig) and obj.group_size < 2:
        raise ConfigError(f"{where}.group_size: GRPO needs >= 2 samples per group, got {obj.group_size}")
    for name, allowed in CHOICES.items():
        v = getattr(obj, name, None)
        if isinstance(v, str) and name in {f.name for f in dataclasses.fields(obj)} and v not in allowed:
            raise ConfigError(f"{where}.{name}: expected {' or '.join(allowed)}, got {v!r}")
    if isinstance(obj, AugmentConfig):
        for name in ("max_retries", "retry_backoff_s"):
            if getattr(obj, name) < 0:
                raise ConfigError(f"{where}.{name}: must be >= 0, got {getattr(obj, name)!r}")
    if isinstance(obj, EvalConfig):
        d = obj.device
        if not (d in ("auto", "cpu", "cuda") or (d.startswith("cuda:") and d[5:].isdigit())):
            raise ConfigError(f"{where}.device: expected cpu, cuda, cuda:N or auto, got {d!r}")
        if obj.clock not in ("host", "device", "held"):
            raise ConfigError(f"{where}.clock: expected host, device or held, got {obj.clock!r}")
    if isinstance(obj, Recipe) and obj.eval.clock != "held":
        # A recipe's stages turn scores into rewards, exemplars and the bench's table: only the clock the red team
        # is kept on may give them ('host' failed 5 of its 22 cases at version 26; on 'device' a candidate can
        # shorten its own clock). EvalConfig in Python and bench/evaluator_bench.py --clock still take the others.
        raise ConfigError(f"{where}.eval.clock: a recipe's stages score on 'held' only, got {obj.eval.clock!r} "
                          "('host' and 'device' are for diagnosis: EvalConfig(clock=...), bench/evaluator_bench.py)")


def with_overrides(obj: Any, overrides: dict[str, Any], where: str) -> Any:
    """A copy of the config dataclass ``obj`` with ``overrides`` (field -> value as a recipe reads them, e.g. from
    ``kernelrl.step.parse_sets``), each checked against its field's type and the result validated as a recipe's
    section is: a ConfigError names the field."""
    return _build(type(obj), {**{f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}, **overrides}, where)


def list_recipes() -> list[str]:
    d = recipes_dir()
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def load_recipe(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> Recipe:
    """Load a named recipe (``smoke``) or a YAML path; ``overrides`` are dotted keys (``{"sft.epochs": 1}``)."""
    p = Path(name_or_path)
    if not (p.suffix in (".yaml", ".yml") and p.exists()):
        p = recipes_dir() / f"{name_or_path}.yaml"
    if not p.exists():
        raise ConfigError(f"recipe {name_or_path!r}: not found (named recipes: {', '.join(list_recipes()) or 'none'})")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"recipe {p}: invalid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"recipe {p}: top level must be a mapping")
    data.setdefault("name", p.stem)
    for key, value in (overrides or {}).items():
        node = data
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):  # e.g. --set sft=3 --set sft.epochs=1: one line, not a TypeError
                raise ConfigError(f"recipe {data['name']}: {key}: {'.'.join(parts[:i + 1])} is {node!r}, "
                                  f"not a mapping")
        node[parts[-1]] = value
    return _build(Recipe, data, f"recipe {data['name']}")


def field_help(cls: type = Recipe, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted name, default, help) for every knob: what ``kernelrl recipes fields`` prints."""
    rows = []
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            rows.extend(field_help(type(default), name + "."))
        else:
            rows.append((name, repr(default), f.metadata.get("help", "")))
    return rows
