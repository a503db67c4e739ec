"""What a newcomer meets first at the command line (issue 17), through the real CLI in a subprocess: the
version, usage errors as one plain line, devices this machine lacks, and a candidate's error that names the
candidate's own code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelrl import EVALUATOR_VERSION, __version__
from kernelrl.config.devices import available_devices, resolve_device
from kernelrl.errors import ConfigError

REDTEAM = Path(__file__).parent / "redteam" / "cpu"
BOX = set("╭╮╰╯│─")


def kernelrl(*args, cwd=None):
    env = dict(os.environ, KERNELRL_HOME=str(Path(cwd or ".") / ".home"))
    return subprocess.run([sys.executable, "-m", "kernelrl.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def one_line_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert not (BOX & set(r.stderr)) and "Traceback" not in r.stdout + r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_version_names_package_and_evaluator():
    r = kernelrl("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"kernelrl {__version__} (evaluator {EVALUATOR_VERSION})"


@pytest.mark.parametrize("args, needle, where", [
    (["eval"], "Missing argument 'task'", "kernelrl eval --help"),
    (["store", "stats", "--nope"], "No such option: --nope", "kernelrl store stats --help"),
    (["--bogus"], "No such option: --bogus", "kernelrl --help"),
])
def test_usage_errors_are_one_plain_line(args, needle, where):
    one_line_error(kernelrl(*args), needle, where)


def test_devices_this_machine_lacks_are_usage_errors(tmp_path):
    cand = tmp_path / "cand.py"
    cand.write_text((REDTEAM / "honest.py").read_text())
    have = ", ".join(available_devices())
    for args in (["eval", "02_Softmax", str(cand), "--device", "cuda:99"],
                 ["worker", "--device", "cuda:99", "--store", f"sqlite:///{tmp_path}/s.db"],
                 ["bench", "--device", "cuda:99", "--out", str(tmp_path / "b")],
                 ["ablate", str(cand), "--task", "02_Softmax", "--device", "cuda:99"],
                 ["eval", "02_Softmax", str(cand), "--device", "tpu"]):
        line = one_line_error(kernelrl(*args, cwd=tmp_path))
        assert "--device" in line, line
        if "cuda:99" in args:
            assert f"(devices: {have})" in line, line
    if have == "cpu":  # on a machine without CUDA: plain "cuda" names what there is
        one_line_error(kernelrl("eval", "02_Softmax", str(cand), "--device", "cuda", cwd=tmp_path),
                       "no CUDA device", "(devices: cpu)")


def test_resolve_device_rules():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") in available_devices()
    with pytest.raises(ConfigError, match="cuda:99"):
        resolve_device("cuda:99")
    with pytest.raises(ConfigError, match="must be cpu, cuda"):
        resolve_device("gpu0")


def _eval_json(tmp_path, source: str) -> dict:
    cand = tmp_path / "cand.py"
    cand.write_text(source)
    r = kernelrl("eval", "02_Softmax", str(cand), "--device", "cpu", "--json", "--budget-s", "0.2",
                 "--correctness-trials", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_candidate_errors_name_the_candidate_not_the_harness(tmp_path):
    d = _eval_json(tmp_path, (REDTEAM / "missing_modelnew.py").read_text())
    assert d["flags"] == ["build-failed"] and "ModelNew" in d["error"]
    assert "kernelrl/evaluation" not in d["error"] and "Traceback" not in d["error"]
    src = ("import torch.nn as nn\n\n\ndef helper(x):\n    return x.view(3, -1, 7)\n\n\n"
           "class ModelNew(nn.Module):\n    def forward(self, x):\n        return helper(x)\n")
    d = _eval_json(tmp_path, src)
    assert "runtime-error" in d["flags"]
    assert "candidate.py, line 5, in helper" in d["error"] and "candidate.py, line 10, in forward" in d["error"]
    assert "kernelrl/evaluation" not in d["error"] and "worker.py" not in d["error"]
    # where the command's own seconds went (the process's age at each step), and its workers' closing
    marks = d["command_s"]
    assert list(marks) == ["cli_ready", "device_named", "workers_started", "torch_imported", "evaluated"], marks
    assert all(isinstance(v, float) for v in marks.values()) and list(marks.values()) == sorted(marks.values())
    assert marks["evaluated"] - marks["torch_imported"] >= d["wall_s"] - 0.05, (marks, d["wall_s"])
    assert 0 <= d["timing"]["close_s"] <= d["wall_s"], d["timing"]


def test_json_is_one_object_when_the_task_itself_fails(tmp_path):
    """--json promises one JSON object on stdout: a task whose reference cannot be built (seen with KernelBench's
    6 GB inputs on this VM) gives an object naming the error and exit 2, not a bare line on stderr."""
    task = tmp_path / "broken_task.py"
    task.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                    "    def __init__(self):\n        super().__init__()\n"
                    "        raise RuntimeError('no memory here')\n\n"
                    "    def forward(self, x):\n        return x\n\n\n"
                    "def get_inputs():\n    return [torch.randn(4)]\n\n\ndef get_init_inputs():\n    return []\n")
    cand = tmp_path / "cand.py"
    cand.write_text(task.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
    r = kernelrl("eval", str(task), str(cand), "--device", "cpu", "--json", cwd=tmp_path)
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    d = json.loads(r.stdout)
    assert "no memory here" in d["error"] and d["task"].endswith("broken_task"), d
    assert r.stderr.strip().splitlines()[-1].startswith("error:") and "no memory here" in r.stderr, r.stderr
