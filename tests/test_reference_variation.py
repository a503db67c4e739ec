"""A wrong output says how much the reference varies on the same inputs (correctness.reference_variation,
worker_variation.cmd_rerun): two more runs of the reference, its state restored before each; a diagnosis beside the
verdict, which it never changes."""

from __future__ import annotations

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import evaluate

CFG = EvalConfig(device="cpu", budget_s=0.3, correctness_trials=3, reverify=False, max_wall_s=90,
                 spread_threshold=10.0)

TASK = '''
import os
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        return torch.tanh(x) + self.extra(x)

    def extra(self, x):
        return 0.0


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
'''
# noise from a source no seed reaches: the reference differs from itself by ~1e-3 of its norm on the same inputs
NOISY = TASK.replace("        return 0.0",
                     "        g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), 'little'))\n"
                     "        return 1e-3 * torch.randn(x.shape, generator=g)")
# state that moves on every call: without the restore, the two runs would differ by 1 everywhere
STATEFUL = TASK.replace("        return 0.0", "        self.calls += 1\n        return self.calls")


def _cand(task: str, body: str = "        return super().forward(x)") -> str:
    return task + f"\n\nclass ModelNew(Model):\n    def forward(self, x):\n{body}\n"


def test_a_reference_that_varies_against_itself_says_so():
    r = evaluate(NOISY, _cand(NOISY), CFG)
    v = r.timing.get("reference_variation") or {}
    assert "wrong-output" in r.flags and r.speedup == 0.0, r.to_dict()  # the verdict is unchanged
    assert 5e-4 < v.get("ref_rel_norm", 0) < 5e-3 and 5e-4 < v["cand_rel_norm"] < 5e-3, v
    assert "the reference against itself on these inputs" in r.error, r.error


def test_a_deterministic_stateful_reference_does_not_vary_when_its_state_is_restored():
    r = evaluate(STATEFUL, _cand(STATEFUL, "        return super().forward(x) * 1.01"), CFG)
    v = r.timing.get("reference_variation") or {}
    assert "wrong-output" in r.flags, r.to_dict()
    assert v.get("ref_rel_norm") == 0.0 and v["ref_max_abs"] == 0.0 and v["cand_rel_norm"] > 1e-3, v
    assert "relative error norm 0, max |diff| 0;" in r.error, r.error
