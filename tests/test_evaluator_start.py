"""The evaluation's start-up: a fresh candidate worker warms up (interpreter, torch, device context) while the
reference loads, instead of being frozen halfway and resumed after calibration (the cold `kernelrl eval` on the
H100 spent 6.3-6.6 s of its candidate "build" on that start-up)."""

from __future__ import annotations

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import evaluate, session
from kernelrl.evaluation.ipc import Channel
from kernelrl.tasks import get_task

HONEST = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
          "    def forward(self, x):\n        return torch.softmax(x, dim=1)\n")


def test_a_fresh_candidate_worker_warms_up_while_the_reference_loads(monkeypatch):
    monkeypatch.setattr(session, "SPARE_WORKERS", 0)  # fresh workers (a spare was warmed when it started)
    sent: list[tuple[int, str, str | None]] = []
    real = Channel.send

    def record(self, header, tensors=None):
        sent.append((id(self), header.get("cmd"), header.get("role")))
        return real(self, header, tensors)

    monkeypatch.setattr(Channel, "send", record)
    res = evaluate(get_task("builtin/L1/02_Softmax"), HONEST, EvalConfig(device="cpu", budget_s=0.2,
                                                                         correctness_trials=2))
    assert res.correct, (res.flags, res.error)
    cmds = [(c, r) for _, c, r in sent]
    ref_load = cmds.index(("load", "ref"))
    warm = [i for i, (c, _) in enumerate(cmds) if c == "warm"]
    assert warm and warm[0] < ref_load, cmds[:6]  # sent before the reference's load, not after calibration
    cand_chan = next(ch for ch, c, r in sent if (c, r) == ("load", "cand"))
    assert sent[warm[0]][0] == cand_chan  # to the candidate's worker, its first command
    assert [c for ch, c, _ in sent if ch == cand_chan][0] == "warm"
