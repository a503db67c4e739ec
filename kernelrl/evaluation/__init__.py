"""The evaluator: sandboxed, paired, randomised, statistically robust speedup (see README.md here).

The names below are loaded on first use (PEP 562): ``from kernelrl.evaluation.flags import FATAL`` must not import
torch, so a step or command that rejects a bad recipe or task says so in about a second instead of after torch's
3-5 s import (a step given ``levels=[9]`` took 5.8 s to say it, on a 2-core host, 2026-11-29)."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_WHERE = {
    "EVALUATOR_VERSION": "api", "EvalResult": "api", "EvaluatorError": "api", "compare": "api", "evaluate": "api",
    "CAPPED": "flags", "FATAL": "flags", "FLAGS": "flags",
    "precompile": "precompile",
    "static_flags": "static", "static_checks": "static",
    "bucket_stats": "stats", "round_toward_one": "stats",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'kernelrl.evaluation' has no attribute {name!r}")
    # static_checks: the name other packages were told about (flags from the source alone)
    value = getattr(importlib.import_module(f"kernelrl.evaluation.{module}"),
                    "static_flags" if name == "static_checks" else name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


class _Package(types.ModuleType):
    """``compare`` and ``precompile`` name both a submodule and the function exported here. Importing a submodule
    sets the package's attribute of that name to it, which the eager ``from ... import`` used to overwrite again;
    loaded lazily, ``kernelrl.evaluation.compare`` would stay the module (8 tests failed with "'module' object is
    not callable", 2026-11-29). The submodules stay in ``sys.modules`` for ``from kernelrl.evaluation.compare
    import ...``."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("compare", "precompile") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
