"""A large reference state (weights) is not shipped to the candidate whole: exact prints first, then only the tensors
the candidate's own model differs in (session._load_state, worker_load.exact_print)."""

from __future__ import annotations

import pytest
import torch

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import evaluate
from kernelrl.evaluation import session as S
from kernelrl.evaluation.worker_load import exact_print

FAST = EvalConfig(device="cpu", budget_s=0.4, correctness_trials=4, reverify=False, max_wall_s=90,
                  spread_threshold=10.0, memory_limit_mb=4096)

TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.a = nn.Linear(n, n)
        self.b = nn.Linear(n, n)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64]
'''
SAME = TASK + "\n\nclass ModelNew(Model):\n    pass\n"
# draws its layers in the other order: same names and shapes, different weights until the reference's are copied
SWAPPED = TASK + '''

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.b = nn.Linear(n, n)
        self.a = nn.Linear(n, n)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))
'''


def test_exact_prints_are_equal_only_for_identical_bytes():
    x = torch.randn(1000)
    assert exact_print(x) == exact_print(x.clone())
    y = x.clone()
    y[537] = torch.nextafter(y[537], torch.tensor(10.0))  # one ulp, one element
    assert exact_print(y) != exact_print(x)
    for t in (torch.zeros(0), torch.arange(7, dtype=torch.uint8), torch.rand(5) < 0.5, torch.randn(3, 5).half(),
              torch.randn(4, 6).t(), torch.arange(9, dtype=torch.uint8)[1:]):
        p = exact_print(t)
        assert p == exact_print(t.clone()) and p[:2] == [str(t.dtype).removeprefix("torch."), list(t.shape)]
    assert exact_print(torch.zeros(3)) != exact_print(torch.zeros(3, dtype=torch.int32))  # dtype is part of it


@pytest.fixture
def prints_always(monkeypatch):
    monkeypatch.setattr(S, "STATE_PRINT_MIN_BYTES", 0)


def test_a_state_the_candidate_already_has_is_not_shipped(prints_always):
    r = evaluate(TASK, SAME, FAST)
    assert r.correct and r.timing["state_tensors_shipped"] == 0, r.to_dict()


def test_only_the_tensors_that_differ_are_shipped_and_the_candidate_is_right(prints_always):
    r = evaluate(TASK, SWAPPED, FAST)
    assert r.correct and r.timing["state_tensors_shipped"] == 4, r.to_dict()  # a.weight, a.bias, b.weight, b.bias


def test_a_small_state_is_shipped_as_before():
    r = evaluate(TASK, SWAPPED, FAST)
    assert r.correct and "state_tensors_shipped" not in r.timing, r.to_dict()
