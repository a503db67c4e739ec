"""What an evaluation returns (``EvalResult``) and the two ways it ends early: ``CandidateFailed`` (a verdict
on the candidate) and ``EvaluatorError`` (the task or the harness broke; no verdict)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelrl import EVALUATOR_VERSION
from kernelrl.errors import KernelRLError
from kernelrl.evaluation import flags as F


@dataclass
class EvalResult:
    executable: bool = False
    correct: bool = False
    speedup: float = 0.0
    flags: list[str] = field(default_factory=list)
    error: str | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    evaluator_version: str = EVALUATOR_VERSION
    device_type: str = "cpu"
    custom_kernel_built: bool | None = None
    compile_error: str | None = None
    wall_s: float = 0.0
    sandbox: dict[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return self.executable and self.correct and not (set(self.flags) & F.FATAL)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["success"] = self.success
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalResult:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def flag(self, name: str) -> None:
        if name not in self.flags:
            self.flags.append(name)


class EvaluatorError(KernelRLError):
    """The reference (the task) failed before any candidate code ran, or the harness itself broke: not a
    verdict on the candidate."""


class TaskBroken(EvaluatorError):
    """The reference's own code failed to load with an error that is the same every time (a missing module, a name
    or type error in the task file): evaluating again cannot help, so job queues do not retry it."""


# Exception kinds of a failed reference load that are the task's code, not the moment (OOM, a CUDA error and a
# dead or slow worker are retried: another attempt or another GPU can succeed).
TASK_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "NameError", "SyntaxError", "IndentationError",
                         "AttributeError", "TypeError", "ValueError", "KeyError", "IndexError", "NotImplementedError",
                         "AssertionError", "ZeroDivisionError"})


class CandidateFailed(Exception):
    def __init__(self, flag: str, message: str, executable: bool = True):
        super().__init__(message)
        self.flag = flag
        self.executable = executable


def candidate_frames(tb, module_path) -> str:
    """The candidate's own frames of a worker's traceback, as ``candidate.py, line N, in f`` plus the source line
    (the harness's frames say nothing about what is wrong with the candidate); '' when it has none."""
    if not isinstance(tb, str) or not tb:
        return ""
    path, name = str(module_path), Path(str(module_path)).name
    lines, out = tb.splitlines(), []
    for i, line in enumerate(lines):
        if line.strip().startswith(f'File "{path}"'):
            out.append("  " + line.strip().replace(f'File "{path}"', name))
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if nxt.strip() and not nxt.strip().startswith("File "):
                out.append("    " + nxt.strip())
    return ("\ncandidate traceback (most recent call last):\n" + "\n".join(out[-20:])) if out else ""
