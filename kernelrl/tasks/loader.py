"""Load KernelBench-format tasks: single files, KernelBench checkouts, and the built-in suite.

A task file defines ``class Model(nn.Module)``, ``get_inputs()`` and ``get_init_inputs()`` (plus module-level
hyperparameters). Loading here is *static* (an AST check): no task code runs in the loading process; the
evaluator runs it in its own sandboxed workers.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from kernelrl.errors import TaskFormatError

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"
_KB_NAME = re.compile(r"^(\d+)_(.+)\.py$")
REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def source_hash(source: str) -> str:
    """Content hash used for idempotent storage (normalised line endings and trailing space)."""
    norm = "\n".join(line.rstrip() for line in source.replace("\r\n", "\n").strip().splitlines())
    return hashlib.sha256(norm.encode()).hexdigest()


@dataclass(frozen=True)
class Task:
    key: str  # unique, e.g. "builtin/L1/02_Softmax" or "kernelbench/L2/80_Gemm_Max_Subtract_GELU"
    name: str  # "02_Softmax"
    level: int
    suite: str
    source: str = field(repr=False)
    path: Path | None = None

    @property
    def source_hash(self) -> str:
        return source_hash(self.source)


def check_source(source: str, where: str, required: tuple[str, ...] = REQUIRED) -> None:
    """Raise TaskFormatError unless the source parses and defines every name in ``required``."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise TaskFormatError(f"{where}: not valid Python (line {e.lineno}: {e.msg})") from None
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    missing = [n for n in required if n not in defined]
    if missing:
        raise TaskFormatError(f"{where}: missing {', '.join(missing)} (a KernelBench task needs {', '.join(required)})")


def load_task_file(path: str | Path, *, suite: str = "file", level: int | None = None) -> Task:
    p = Path(path)
    if not p.is_file():
        raise TaskFormatError(f"{p}: no such task file")
    try:
        source = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TaskFormatError(f"{p}: cannot read ({e})") from None
    check_source(source, str(p))
    if level is None:
        m = re.search(r"level(\d+)", str(p.parent.name))
        level = int(m.group(1)) if m else 0
    return Task(key=f"{suite}/L{level}/{p.stem}", name=p.stem, level=level, suite=suite, source=source, path=p)


def _load_level_dirs(root: Path, suite: str, levels: list[int] | None) -> list[Task]:
    tasks: list[Task] = []
    found_any = False
    for level_dir in sorted(root.glob("level*")):
        m = re.fullmatch(r"level(\d+)", level_dir.name)
        if not m or not level_dir.is_dir():
            continue
        found_any = True
        level = int(m.group(1))
        if levels and level not in levels:
            continue
        files = [f for f in level_dir.glob("*.py") if _KB_NAME.match(f.name)]
        files.sort(key=lambda f: (int(_KB_NAME.match(f.name).group(1)), f.name))
        tasks.extend(load_task_file(f, suite=suite, level=level) for f in files)
    if not found_any:
        raise TaskFormatError(f"{root}: no level1/ .. level4/ folders (expected a KernelBench checkout)")
    return tasks


def load_suite(spec: str | Path = "builtin", levels: list[int] | None = None) -> list[Task]:
    """``builtin``, a KernelBench checkout (the repo root or its KernelBench/ folder), or a single ``.py`` file."""
    if str(spec) == "builtin":
        return _load_level_dirs(BUILTIN_DIR, "builtin", levels)
    p = Path(spec)
    if p.is_file():
        return [load_task_file(p)]
    if p.is_dir():
        root = p / "KernelBench" if (p / "KernelBench").is_dir() else p
        tasks = _load_level_dirs(root, "kernelbench", levels)
        if not tasks:
            raise TaskFormatError(f"{p}: the suite is empty for levels {levels}")
        return tasks
    raise TaskFormatError(f"suite {spec!r}: not 'builtin', a task file or a KernelBench directory")


def get_task(ref: str | Path, suite: str = "builtin") -> Task:
    """A task by file path, by full key (``builtin/L1/02_Softmax``) or by name within ``suite``."""
    p = Path(ref)
    if p.suffix == ".py" and p.exists():
        return load_task_file(p)
    ref = str(ref)
    tasks = load_suite(suite)
    for t in tasks:
        if ref in (t.key, t.name) or t.name.split("_", 1)[-1] == ref:
            return t
    raise TaskFormatError(f"task {ref!r}: not found in suite {suite!r} and not a file")
