"""The evaluation's start-up: a fresh candidate worker warms up (interpreter, torch, device context) while the
reference loads, instead of being frozen halfway and resumed after calibration (the cold `kernelrl eval` on the
H100 spent 6.3-6.6 s of its candidate "build" on that start-up). And its end: every worker closed, side by side
where threads can be had, and no failure of a close lost."""

from __future__ import annotations

import os

import pytest

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


# -- the cold command: its workers start before it imports torch (spares.prestart) ------------------------------
def test_the_cold_command_runs_its_evaluation_in_workers_started_before_its_torch_import(tmp_path):
    """``kernelrl eval`` names its device, builds its settings and starts its workers without importing torch, then
    imports torch while they start (on an H200 host the two imports took ~4 s each, one after the other), and its
    evaluation takes those workers, waiting for them while they start."""
    import json
    import os
    import subprocess
    import sys

    probe = ("import sys\nfrom kernelrl.config.devices import resolve_device\nfrom kernelrl.config.stages import "
             "EvalConfig\nfrom kernelrl.evaluation.placement import pins\nfrom kernelrl.evaluation.spares import "
             "prestart, worker_kwargs\nfrom kernelrl.evaluation.static import syntax_error\n"
             "dev = resolve_device('auto')\nworker_kwargs(EvalConfig(device=dev), dev, pins(dev))\n"
             "print('torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "False", (r.stdout, r.stderr[-2000:])
    cand = tmp_path / "cand.py"
    cand.write_text(HONEST)
    r = subprocess.run([sys.executable, "-m", "kernelrl.cli", "eval", "02_Softmax", str(cand), "--device", "cpu",
                        "--json", "--budget-s", "0.2", "--correctness-trials", "1"], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, KERNELRL_HOME=str(tmp_path / "home")))
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert d["correct"], (d["flags"], d["error"])
    assert d["timing"]["spare_workers_used"] == 2  # the reference's and the candidate's, both prestarted


def test_the_cold_command_answers_a_candidate_that_does_not_compile_without_importing_torch(tmp_path):
    """A source that does not compile gets evaluate's own result (build-failed, the candidate's line, static flags)
    from the command before any worker or torch import: a torch on the path that cannot be imported changes
    nothing (on the H100 the command took 4.7 s, 3.2 s of it torch's import, c24). The same source through
    evaluate gives the same verdict and words."""
    import json
    import subprocess
    import sys

    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('torch imported for a source that does not compile')\n")
    src = "import torch\nimport subprocess\n\nclass ModelNew(torch.nn.Module:\n    pass\n"
    cand = tmp_path / "cand.py"
    cand.write_text(src)
    env = dict(os.environ, KERNELRL_HOME=str(tmp_path / "home"),
               PYTHONPATH=os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", ""), os.getcwd()]))
    for extra in (["--json"], ["--json", "--store"], []):
        r = subprocess.run([sys.executable, "-m", "kernelrl.cli", "eval", "02_Softmax", str(cand), "--device", "cpu",
                            *extra], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, (extra, r.stdout[-1000:], r.stderr[-2000:])
        if not extra:
            assert "build-failed" in r.stdout and "candidate.py, line 4" in r.stdout, r.stdout
            continue
        d = json.loads(r.stdout)
        assert list(d["command_s"]) == ["cli_ready", "device_named", "evaluated"], d["command_s"]
        ref = evaluate(get_task("02_Softmax"), src, EvalConfig(device="cpu")).to_dict()
        assert {k: d[k] for k in ("flags", "error", "compile_error", "executable", "correct", "speedup",
                                  "device_type", "evaluator_version")} == \
            {k: ref[k] for k in ("flags", "error", "compile_error", "executable", "correct", "speedup",
                                 "device_type", "evaluator_version")}
        assert "spawns-processes" in d["flags"] and d["flags"][-1] == "build-failed", d["flags"]


def test_a_prestarted_worker_that_fails_to_start_ends_the_wait_at_once(monkeypatch):
    """An evaluation waits for a worker prestart began only while it is starting: a start that fails hands back
    None at once (the evaluation then starts its own), and nothing is started again (per_key 0)."""
    import threading
    import time

    from kernelrl.evaluation import spares

    started = threading.Event()

    def broken(*a, **k):
        started.set()
        time.sleep(0.5)
        raise OSError("no interpreter")

    monkeypatch.setattr(spares, "WorkerProcess", broken)
    pool = spares.Spares(per_key=0)
    kw = spares.worker_kwargs(EvalConfig(device="cpu"), "cpu", pinned=False)
    pool.start("ref", kw)
    assert started.wait(10)
    t0 = time.monotonic()
    assert pool.take("ref", kw, wait_s=60) is None
    assert time.monotonic() - t0 < 5
    assert pool._todo.empty() and not pool._starting.get(pool._key("ref", kw))
    assert pool.take("cand", kw, wait_s=60) is None  # nothing starting for that key: no wait at all


# -- a torch.compile candidate's worker imports the compiler while it waits (static.preimports_compiler) ----------
# Names torch.compile (never calls it: no compile on this host's 2 cores) and checks, when built, what its worker
# imported and the compile threads inductor decided when its config was imported.
_NAMES_COMPILE = ("import sys\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                  "    def __init__(self):\n        super().__init__()\n"
                  "        self.f = torch.compile  # named, not called\n"
                  "        import torch._inductor.config as c\n"
                  "        assert c.compile_threads == 1, c.compile_threads\n\n"
                  "    def forward(self, x):\n        return torch.softmax(x, dim=1)\n")
# Sets a variable inductor reads when its config is imported, and fails unless the setting took effect: its worker
# must not have imported inductor before the source ran.
_SETS_A_VARIABLE = ("import os\nos.environ['TORCHINDUCTOR_FX_GRAPH_CACHE'] = '0'\n" + _NAMES_COMPILE.replace(
    "        assert c.compile_threads == 1, c.compile_threads\n",
    "        assert c.compile_threads == 1 and c.fx_graph_cache is False, (c.compile_threads, c.fx_graph_cache)\n"))


def test_preimports_compiler_is_for_sources_that_name_torch_compile_and_set_no_variable():
    from kernelrl.evaluation.static import preimports_compiler
    from kernelrl.reports.reference_baselines import baseline_source

    task = get_task("builtin/L1/09_Swish")
    assert preimports_compiler(baseline_source(task, "baseline:compile"))
    assert preimports_compiler(baseline_source(task, "baseline:compile-reduce-overhead"))
    assert not preimports_compiler(baseline_source(task, "baseline:self")) and not preimports_compiler(HONEST)
    assert preimports_compiler(_NAMES_COMPILE) and not preimports_compiler(_SETS_A_VARIABLE)
    assert not preimports_compiler("import torch\nf = torch.compile(g)\nos.putenv('X', '1')\n")
    assert not preimports_compiler("import torch\n# TORCH_LOGS=+dynamo\nf = torch.compile(g)\n")
    assert not preimports_compiler("@triton.jit\ndef k(x_ptr): pass\n")  # Triton alone: no dynamo to import


def test_a_torch_compile_candidates_worker_imports_the_compiler_while_it_waits(monkeypatch):
    """Fresh and spare: the worker of a source naming torch.compile imports dynamo and inductor in its warm-up
    (timing.compiler_preimport_s), with inductor's compile threads at one from the worker's environment; a spare
    for such a source is its own kind (the next evaluation takes it); a source that sets a variable inductor reads at
    import gets a worker that imported nothing of it, so its setting takes effect."""
    from kernelrl.evaluation import spares

    pool = spares.Spares()
    monkeypatch.setattr(session, "SPARES", pool)
    monkeypatch.setattr(session, "SPARE_WORKERS", 1)  # spares on the CPU too (the CUDA default is 2)
    cfg = EvalConfig(device="cpu", budget_s=0.2, correctness_trials=1)
    task = get_task("builtin/L1/02_Softmax")
    try:
        first = evaluate(task, _NAMES_COMPILE, cfg)  # no spare yet: fresh workers; replacements start
        assert first.correct, (first.flags, first.error)
        assert first.timing["compiler_preimport_s"] > 0 and first.timing["spare_workers_used"] == 0
        second = evaluate(task, _NAMES_COMPILE, cfg)  # a spare of its kind, started (or waited for) meanwhile
        assert second.correct, (second.flags, second.error)
        assert second.timing["spare_workers_used"] == 2 and second.timing["compiler_preimport_s"] > 0
        plain = evaluate(task, _SETS_A_VARIABLE, cfg)
        assert plain.correct, (plain.flags, plain.error)
        assert plain.timing["compiler_preimport_s"] is None and plain.timing["spare_workers_used"] == 1  # the ref's
    finally:
        pool.close_all()


def test_workers_are_closed_even_when_no_close_thread_can_start(monkeypatch):
    """A candidate's fork bomb can hold a container's pids limit when the evaluation closes its workers (CI's docker
    sandbox test: "can't start new thread" out of close_together, no result). Each close whose thread cannot start
    runs in the caller after the candidate's, and every worker ends."""
    import threading

    from kernelrl.evaluation.api import close_together
    from kernelrl.evaluation.sandbox import WorkerProcess

    workers = [WorkerProcess(role, device="cpu", cache_dir=None, mem_limit_mb=4096, drop_privileges=False)
               for role in ("cand", "ref", "holder")]
    order: list[str] = []
    real_close = WorkerProcess.close

    def close(self):
        order.append(self.role)
        return real_close(self)

    def no_thread(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(WorkerProcess, "close", close)
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    try:
        assert all(w.alive() for w in workers)
        assert close_together(*workers) == []
        assert order == ["cand", "ref", "holder"] and not any(w.alive() for w in workers)
    finally:
        monkeypatch.undo()
        for w in workers:
            if w.alive():
                w.close()


def test_a_worker_whose_context_thread_cannot_start_says_why_and_goes_on(monkeypatch):
    import threading

    from kernelrl.evaluation import worker_context

    def no_thread(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(worker_context, "RESULT", {})
    monkeypatch.setattr(worker_context, "_THREAD", [])
    monkeypatch.setenv(worker_context.ENV, "0")
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    worker_context.begin()  # torch then makes the context itself, as before the thread
    assert worker_context.wait(1.0) == {"error": "no context thread: can't start new thread"}
    assert worker_context.ENV not in os.environ


def test_every_worker_is_closed_when_closes_fail_and_no_failure_is_lost():
    from kernelrl.evaluation.api import close_together

    closed: list[str] = []

    class Failing:
        def __init__(self, role: str, fails: bool):
            self.role, self.fails = role, fails

        def close(self):
            closed.append(self.role)
            if self.fails:
                raise OSError(f"{self.role} would not close")
            return [7]

    with pytest.raises(OSError, match="cand would not close") as e:
        close_together(Failing("cand", True), Failing("ref", True), None, Failing("holder", False))
    assert sorted(closed) == ["cand", "holder", "ref"]
    assert e.value.__notes__ == ["also failed while closing: OSError: ref would not close"]
    closed.clear()
    with pytest.raises(OSError, match="ref would not close"):
        close_together(Failing("cand", False), Failing("ref", True))
    assert sorted(closed) == ["cand", "ref"]
    assert close_together(Failing("cand", False), Failing("ref", False)) == [7]


@pytest.mark.gpu
def test_the_drivers_device_name_is_the_one_torch_reports():
    """device_type of a result answered before torch's import (a source that does not compile) is the name the
    driver gives, which must be torch's own (rows are grouped by it)."""
    import json
    import subprocess
    import sys

    probe = ("import json, sys\nfrom kernelrl.config.devices import device_name\nname = device_name('cuda:0')\n"
             "assert 'torch' not in sys.modules\nimport torch\n"
             "print(json.dumps([name, torch.cuda.get_device_name(0)]))\n")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    ours, torchs = json.loads(r.stdout)
    assert ours == torchs and ours.startswith("NVIDIA"), (ours, torchs)
