"""A wrong output says how much the reference varies on the same inputs (correctness.reference_variation,
worker_variation.cmd_rerun): two more runs of the reference, its state restored before each. A candidate as close
to the reference as the reference to itself passes that set (compare.within_variation, evaluator version 14),
within VARIATION_FACTOR and never past VARIATION_CAP x the dtype's bound."""

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
# noise from a source no seed reaches, scaled to the output: the reference differs from itself by ~1.4e-3 of its
# norm on the same inputs, past the cap (10 x float32's 1e-4)
NOISY = TASK.replace("        return 0.0",
                     "        g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), 'little'))\n"
                     "        return 1e-3 * torch.tanh(x).pow(2).mean().sqrt() * torch.randn(x.shape, generator=g)")
# the same, ten times smaller: ~1.4e-4 run to run, over the 1e-4 bound and under the cap
SLIGHTLY_NOISY = NOISY.replace("return 1e-3 *", "return 1e-4 *")
# ... and a dropout: the reruns must leave the reference's random generators where they were, or its later timed
# calls draw other masks than the candidate's (a timing-mismatch for an honest copy)
DROPOUT = SLIGHTLY_NOISY.replace("return torch.tanh(x) +",
                                 "return torch.nn.functional.dropout(torch.tanh(x), 0.1, training=True) +")
# state that moves on every call: without the restore, the two runs would differ by 1 everywhere
STATEFUL = TASK.replace("        return 0.0", "        self.calls += 1\n        return self.calls")


def _cand(task: str, body: str = "        return super().forward(x)") -> str:
    return task + f"\n\nclass ModelNew(Model):\n    def forward(self, x):\n{body}\n"


def test_a_reference_that_varies_past_the_cap_says_so_and_fails_its_own_copy():
    r = evaluate(NOISY, _cand(NOISY), CFG)
    v = r.timing.get("reference_variation") or {}
    assert "wrong-output" in r.flags and r.speedup == 0.0, r.to_dict()  # the verdict is unchanged
    assert 1e-3 < v.get("ref_rel_norm", 0) < 3e-3 and 1e-3 < v["cand_rel_norm"] < 3e-3, v
    assert v["within"] is False and "the reference against itself on these inputs" in r.error, r.error


def test_a_copy_of_a_slightly_noisy_reference_passes_within_its_variation():
    r = evaluate(SLIGHTLY_NOISY, _cand(SLIGHTLY_NOISY), CFG)
    v = r.timing.get("reference_variation") or {}
    assert r.correct and r.speedup > 0 and "wrong-output" not in r.flags, r.to_dict()
    assert "within-reference-variation" in r.flags and v["within"] is True, v
    assert 1e-4 < v["ref_rel_norm"] < 1e-3 and v["sets_passed"] >= 3, v  # every set failed the bound alone, and
    assert r.timing["audits"] >= 1 and v["sets_passed"] >= 3 + r.timing["audits"], r.timing  # each audit too


def test_the_reruns_leave_a_dropout_reference_drawing_what_the_candidate_draws():
    r = evaluate(DROPOUT, _cand(DROPOUT), CFG)
    v = r.timing.get("reference_variation") or {}
    assert r.correct and r.speedup > 0 and "timing-mismatch" not in r.flags, r.to_dict()
    assert v["sets_passed"] >= 3 + r.timing["audits"], r.timing


def test_a_real_error_beside_a_slightly_noisy_reference_still_fails():
    # 7e-4 of the output's norm: under the cap (1e-3), ~5x the reference's own variation (outside VARIATION_FACTOR)
    body = "        y = super().forward(x)\n        return y + 7e-4 * y.pow(2).mean().sqrt() * torch.sign(x)"
    r = evaluate(SLIGHTLY_NOISY, _cand(SLIGHTLY_NOISY, body), CFG)
    v = r.timing.get("reference_variation") or {}
    assert "wrong-output" in r.flags and not r.correct and v.get("within") is False, r.to_dict()


def test_a_deterministic_stateful_reference_does_not_vary_when_its_state_is_restored():
    r = evaluate(STATEFUL, _cand(STATEFUL, "        return super().forward(x) * 1.01"), CFG)
    v = r.timing.get("reference_variation") or {}
    assert "wrong-output" in r.flags, r.to_dict()
    assert v.get("ref_rel_norm") == 0.0 and v["ref_max_abs"] == 0.0 and v["cand_rel_norm"] > 1e-3, v
    assert "relative error norm 0, max |diff| 0;" in r.error, r.error
