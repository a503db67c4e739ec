"""A forward that binds a tensor attribute to a new tensor on each call is not captured in a CUDA graph
(worker_load.rebound_attrs): KernelBench level 3 33_VanillaRNN (``self.hidden = tanh(...)``) failed its self-pair
with an illegal memory access on the H200, the replayed graph reading the hidden state freed after capture."""

import pytest
import torch

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import evaluate
from kernelrl.evaluation.worker_load import rebound_attrs, tensor_attrs

RNN_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """KernelBench L3 33_VanillaRNN's pattern, small: the hidden state is a plain attribute, rebound each call."""

    def __init__(self, n: int):
        super().__init__()
        self.hidden = torch.randn(8, n)
        self.i2h = nn.Linear(2 * n, n)

    def forward(self, x, initial_hidden=None):
        if initial_hidden is not None:
            self.hidden.copy_(initial_hidden)
        self.hidden = self.hidden.to(x.device)
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
        return self.hidden * 2.0


def get_inputs():
    return [torch.rand(8, 64), torch.rand(8, 64)]


def get_init_inputs():
    return [64]
'''
SELF = RNN_TASK + "\n\nclass ModelNew(Model):\n    pass\n"


def _namespace(src: str) -> dict:
    ns: dict = {}
    exec(compile(src, "task.py", "exec"), ns)  # noqa: S102 - the test's own task source
    return ns


def _seen(model, calls) -> list:
    seen = [tensor_attrs(model)]
    for args in calls:
        model(*args)
        seen.append(tensor_attrs(model))
    return seen


def test_a_rebound_tensor_attribute_is_named_and_an_in_place_update_is_not():
    ns = _namespace(RNN_TASK)
    rnn = ns["Model"](64)
    why = rebound_attrs(_seen(rnn, [ns["get_inputs"]() for _ in range(2)]))
    assert "hidden" in why and "freed" in why, why
    bn = torch.nn.Sequential(torch.nn.BatchNorm1d(16), torch.nn.ReLU()).train()  # running stats: in place
    bn.scratch = torch.zeros(3)  # a plain tensor attribute that forward leaves alone
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    assert rebound_attrs(_seen(bn, [(torch.randn(4, 16),) for _ in range(2)])) == ""
    assert not torch.equal(before["0.running_mean"], bn.state_dict()["0.running_mean"])  # it did update
    assert set(tensor_attrs(bn)) == {"scratch"}  # parameters and buffers are not attributes of this kind


def test_an_attribute_set_first_at_the_first_call_is_not_a_rebinding():
    class Lazy(torch.nn.Module):
        def forward(self, x):
            if getattr(self, "cache", None) is None:
                self.cache = x.sum()
            return x + self.cache

    m = Lazy()
    assert rebound_attrs(_seen(m, [(torch.ones(3),)] * 2)) == ""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_reference_that_rebinds_its_state_is_timed_eagerly_not_replayed():
    r = evaluate(RNN_TASK, SELF, EvalConfig(device="cuda", budget_s=0.5, correctness_trials=4, reverify=False,
                                            max_wall_s=120))
    assert r.success and 0.9 <= r.speedup <= 1.1, r.to_dict()
    g = r.timing.get("graphs") or {}
    assert g.get("used") is False and "hidden" in str(g.get("why")), g
