"""Configuration: environment settings, stage config dataclasses, named recipes."""

from kernelrl.config.settings import Settings, get_settings
from kernelrl.config.stages import (
    AugmentConfig,
    BenchConfig,
    CRLConfig,
    EvalConfig,
    ModelConfig,
    SamplerConfig,
    SelfSupConfig,
    SFTConfig,
)
from kernelrl.config.recipes import Recipe, list_recipes, load_recipe

__all__ = [
    "Settings", "get_settings", "AugmentConfig", "BenchConfig", "CRLConfig", "EvalConfig", "ModelConfig",
    "SamplerConfig", "SelfSupConfig", "SFTConfig", "Recipe", "list_recipes", "load_recipe",
]
