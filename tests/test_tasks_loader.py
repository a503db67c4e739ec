"""Task loading: single files, KernelBench checkout layout, and clear errors for broken files."""

from __future__ import annotations

import pytest

from kernelrl.errors import TaskFormatError
from kernelrl.tasks import get_task, load_suite, load_task_file

GOOD = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.relu(x)

batch_size = 16
def get_inputs():
    return [torch.randn(batch_size, 8)]
def get_init_inputs():
    return []
"""


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_load_file(tmp_path):
    t = load_task_file(write(tmp_path / "level2" / "7_Relu.py", GOOD))
    assert t.level == 2 and t.name == "7_Relu" and "torch.relu" in t.source and len(t.source_hash) == 64


@pytest.mark.parametrize("drop, missing", [
    ("class Model", "Model"), ("def get_inputs", "get_inputs"), ("def get_init_inputs", "get_init_inputs")])
def test_missing_names_are_clear(tmp_path, drop, missing):
    text = GOOD.replace(drop, drop.replace(missing, "Other"))
    with pytest.raises(TaskFormatError, match=f"missing {missing}"):
        load_task_file(write(tmp_path / "t.py", text))


def test_syntax_error_and_missing_file(tmp_path):
    with pytest.raises(TaskFormatError, match="not valid Python"):
        load_task_file(write(tmp_path / "t.py", "def broken(:\n"))
    with pytest.raises(TaskFormatError, match="no such task file"):
        load_task_file(tmp_path / "nope.py")


def test_kernelbench_checkout(tmp_path):
    root = tmp_path / "KernelBench-repo" / "KernelBench"
    for lvl, name in [(1, "1_A.py"), (1, "10_B.py"), (1, "2_C.py"), (2, "1_D.py"), (4, "1_E.py")]:
        write(root / f"level{lvl}" / name, GOOD)
    write(root / "level1" / "notes.py", "x = 1\n")  # not <id>_<Name>.py: ignored
    tasks = load_suite(tmp_path / "KernelBench-repo")
    assert [t.name for t in tasks] == ["1_A", "2_C", "10_B", "1_D", "1_E"]
    assert [t.level for t in tasks] == [1, 1, 1, 2, 4]
    assert [t.key for t in load_suite(root, levels=[2])] == ["kernelbench/L2/1_D"]


def test_not_a_checkout(tmp_path):
    with pytest.raises(TaskFormatError, match="KernelBench checkout"):
        load_suite(tmp_path)


def test_get_task_by_path(tmp_path):
    p = write(tmp_path / "x.py", GOOD)
    assert get_task(str(p)).source == GOOD
    with pytest.raises(TaskFormatError, match="not found"):
        get_task("definitely_not_a_task")
