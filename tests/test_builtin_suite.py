"""The built-in task suite: counts per level, every task loads, every reference builds and runs on one CPU
thread at its default sizes inside the 1-50 ms band (asserted with slack: 0.3-150 ms, the machine is shared)."""

from __future__ import annotations

import ast
import re
import statistics
import time

import pytest
import torch

from kernelrl.tasks import load_suite
from kernelrl.tasks.loader import BUILTIN_DIR

MIN_PER_LEVEL = {1: 12, 2: 12, 3: 6}
TASKS = load_suite("builtin")
_TIMINGS: dict[str, float] = {}


def _exec(source: str, name: str) -> dict:
    ns: dict = {"__name__": f"builtin_task_{name}"}
    exec(compile(source, name, "exec"), ns)  # noqa: S102 - our own files
    return ns


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_suite_counts():
    assert len(TASKS) >= 30
    by_level = {lvl: [t for t in TASKS if t.level == lvl] for lvl in MIN_PER_LEVEL}
    for lvl, minimum in MIN_PER_LEVEL.items():
        assert len(by_level[lvl]) >= minimum, f"level {lvl}: {len(by_level[lvl])} tasks < {minimum}"
    assert {t.level for t in TASKS} == {1, 2, 3}
    assert len({t.key for t in TASKS}) == len(TASKS)
    assert len({t.name for t in TASKS}) == len(TASKS), "task names must be unique across levels"


def test_file_names_numbered_from_01_per_level():
    for lvl in MIN_PER_LEVEL:
        names = sorted(p.name for p in (BUILTIN_DIR / f"level{lvl}").glob("*.py"))
        numbers = [int(re.match(r"^(\d+)_\w+\.py$", n).group(1)) for n in names]
        assert numbers == list(range(1, len(names) + 1)), f"level{lvl}: {names}"
        assert all(re.fullmatch(r"\d\d_[A-Za-z0-9_]+\.py", n) for n in names)


@pytest.mark.parametrize("task", TASKS, ids=[t.key for t in TASKS])
def test_task_format(task):
    tree = ast.parse(task.source)
    doc = ast.get_docstring(tree)
    assert doc and len(doc) <= 200, "a short module docstring stating the operation"
    src = task.source
    assert "import torch" in src and "import torch.nn as nn" in src
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    assert any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in model.body)
    assert task.key == f"builtin/L{task.level}/{task.name}"


@pytest.mark.parametrize("task", TASKS, ids=[t.key for t in TASKS])
def test_reference_runs_in_band(task, one_thread):
    ns = _exec(task.source, task.name)
    init = ns["get_init_inputs"]()
    assert isinstance(init, list)
    torch.manual_seed(0)
    model = ns["Model"](*init)
    torch.manual_seed(1)
    inputs = ns["get_inputs"]()
    torch.manual_seed(2)
    other = ns["get_inputs"]()
    assert isinstance(inputs, list) and inputs
    for a, b in zip(inputs, other):
        assert isinstance(a, torch.Tensor)
        assert a.dtype == torch.float32 or not a.is_floating_point(), f"{a.dtype}: inputs are float32"
        assert a.shape == b.shape and not torch.equal(a, b), "get_inputs must draw random inputs"
    with torch.no_grad():
        out = model(*inputs)  # warm-up (also: it runs)
        outs = out if isinstance(out, (tuple, list)) else [out]
        assert all(isinstance(o, torch.Tensor) for o in outs)
        assert all(torch.isfinite(o.float()).all() for o in outs)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            model(*inputs)
            times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    _TIMINGS[task.key] = ms
    assert 0.3 <= ms <= 150.0, f"{task.key}: {ms:.2f} ms per call on one thread (target 1-50 ms)"


def test_print_timing_table(capsys):
    """Prints the measured reference times (run after the parametrised timing tests)."""
    if not _TIMINGS:
        pytest.skip("no timings collected (run the whole file)")
    with capsys.disabled():
        print("\n| task | ref ms (1 thread, median of 5) |\n|---|---|")
        for key in sorted(_TIMINGS):
            print(f"| {key} | {_TIMINGS[key]:.2f} |")
