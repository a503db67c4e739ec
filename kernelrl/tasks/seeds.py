"""The seed corpus: hand-written ``ModelNew`` candidates for the built-in tasks.

Layout: ``kernelrl/tasks/builtin/seeds/level<L>/<task name>/<variant>.py``. Every seed file starts with a
header that states what it is meant to be (the claim a test checks on CPU where it can)::

    # kernelrl-seed
    # expect: faster | slower | wrong
    # device: any | cuda
    # technique: <comma-separated tags>
    # why: <one line>

The corpus is the offline stand-in for teacher LLMs and the SFT data of the smoke recipe.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelrl.errors import TaskFormatError
from kernelrl.tasks.loader import BUILTIN_DIR, Task, check_source

SEEDS_DIR = BUILTIN_DIR / "seeds"
EXPECTS = ("faster", "slower", "wrong")  # what the seed is meant to be against the reference
DEVICES = ("any", "cuda")  # "cuda": needs a GPU (load_inline or Triton); "any": plain PyTorch, runs on CPU too
HEADER_KEYS = ("expect", "device", "technique", "why")


@dataclass(frozen=True)
class Seed:
    task_key: str  # the Task.key it answers, e.g. "builtin/L1/02_Softmax"
    name: str  # the variant, the file stem, e.g. "torch_softmax"
    path: Path
    source: str
    expect: str  # one of EXPECTS
    device: str  # one of DEVICES
    techniques: tuple[str, ...]
    why: str


def parse_header(source: str, where: str) -> dict[str, object]:
    """The header fields of a seed file; TaskFormatError naming ``where`` if it is malformed."""
    lines = source.splitlines()
    if not lines or lines[0].strip() != "# kernelrl-seed":
        raise TaskFormatError(f"{where}: a seed file must start with the line '# kernelrl-seed'")
    fields: dict[str, object] = {}
    for i, key in enumerate(HEADER_KEYS, start=1):
        line = lines[i].strip() if i < len(lines) else ""
        prefix = f"# {key}:"
        if not line.startswith(prefix):
            raise TaskFormatError(f"{where}: header line {i + 1} must be '{prefix} ...', got {line!r}")
        value = line[len(prefix):].strip()
        if not value:
            raise TaskFormatError(f"{where}: header field '{key}' is empty")
        fields[key] = value
    if fields["expect"] not in EXPECTS:
        raise TaskFormatError(f"{where}: expect must be one of {'|'.join(EXPECTS)}, got {fields['expect']!r}")
    if fields["device"] not in DEVICES:
        raise TaskFormatError(f"{where}: device must be one of {'|'.join(DEVICES)}, got {fields['device']!r}")
    tags = tuple(t.strip() for t in str(fields["technique"]).split(",") if t.strip())
    if not tags:
        raise TaskFormatError(f"{where}: technique needs at least one tag")
    fields["technique"] = tags
    return fields


def load_seed_file(path: str | Path, task_key: str) -> Seed:
    p = Path(path)
    try:
        source = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TaskFormatError(f"{p}: cannot read ({e})") from None
    h = parse_header(source, str(p))
    check_source(source, str(p), required=("ModelNew",))
    return Seed(task_key=task_key, name=p.stem, path=p, source=source, expect=str(h["expect"]),
                device=str(h["device"]), techniques=h["technique"], why=str(h["why"]))  # type: ignore[arg-type]


def seed_dir(task: Task, root: Path = SEEDS_DIR) -> Path:
    return root / f"level{task.level}" / task.name


def load_seeds(task: Task, root: Path = SEEDS_DIR) -> list[Seed]:
    """The seeds of one task, sorted by variant name; [] when the task has none (e.g. a KernelBench task)."""
    d = seed_dir(task, root)
    if not d.is_dir():
        return []
    return [load_seed_file(f, task.key) for f in sorted(d.glob("*.py"))]


def all_seeds(tasks: list[Task], root: Path = SEEDS_DIR) -> list[Seed]:
    return [s for t in tasks for s in load_seeds(t, root)]
