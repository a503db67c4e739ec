"""A CUDA worker's device context begun in a thread while it imports torch (kernelrl/evaluation/worker_context.py):
the parent names the device at spawn, the worker's thread sets the scheduling flag and retains the primary context,
and the worker takes that result before torch's first CUDA call. CPU tests here (the parent's side, a worker
process on a host without a driver); the GPU tests check the context torch then uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kernelrl.evaluation import worker_context


def test_the_parent_names_a_cuda_workers_device_and_can_switch_it_off(monkeypatch):
    monkeypatch.delenv(worker_context.ENV, raising=False)
    assert worker_context.for_worker("cpu") == {}
    assert worker_context.for_worker("cuda") == {worker_context.ENV: "0"}
    assert worker_context.for_worker("cuda:3") == {worker_context.ENV: "3"}
    monkeypatch.setenv(worker_context.ENV, "0")  # the A/B switch in the parent's own environment
    assert worker_context.for_worker("cuda:3") == {}


PROBE = """
import json, os, sys
from kernelrl.evaluation import worker_context as w
w.begin()
import torch  # the import the thread overlaps
r = w.wait()
print(json.dumps({"result": r, "env_left": w.ENV in os.environ, "torch_cuda_initialized": torch.cuda.is_initialized()}))
"""


def _probe(env_value: str | None, blocking: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (worker_context.ENV, "KERNELRL_BLOCKING_SYNC")}
    if env_value is not None:
        env[worker_context.ENV] = env_value
    if blocking:
        env["KERNELRL_BLOCKING_SYNC"] = "1"
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _has_driver() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def test_a_worker_without_a_named_device_starts_no_thread_and_a_bad_one_says_why():
    out = _probe(None)
    assert out["result"] == {} and not out["env_left"]
    out = _probe("x")
    assert out["result"] == {"error": "KERNELRL_EARLY_CONTEXT='x' is not a device index"} and not out["env_left"]


@pytest.mark.skipif(_has_driver(), reason="checks a host without a CUDA driver")
def test_on_a_host_without_a_driver_the_thread_reports_it_and_the_worker_goes_on():
    """The variable is removed before anything else starts (the candidate's code never sees it); the thread's
    failure is a report (torch then makes, or fails to make, its context as before), never the worker's end."""
    out = _probe("0", blocking=True)
    r = out["result"]
    assert "OSError" in r["error"] and "libcuda" in r["error"] and "retained" not in r and "sched" not in r
    assert isinstance(r["s"], float) and not out["env_left"] and not out["torch_cuda_initialized"]


@pytest.mark.gpu
def test_the_thread_retains_the_primary_context_torch_then_uses(tmp_path):
    """On a GPU: the thread sets BLOCKING_SYNC and retains the primary context while torch imports; the worker's
    warm-up then reports both, and torch's context is that primary context with the flag (cuCtxGetFlags in the
    worker's own process would say so: here its reply's ``sched`` and the probe's context handle)."""
    code = """
import ctypes, json, os
from kernelrl.evaluation import worker_context as w
w.begin()
import torch
r = w.wait()
torch.cuda.set_device(0); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
lib = ctypes.CDLL("libcuda.so.1")
cur, prim, dev, flags, active = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
lib.cuCtxGetCurrent(ctypes.byref(cur)); lib.cuDeviceGet(ctypes.byref(dev), 0)
lib.cuDevicePrimaryCtxRetain(ctypes.byref(prim), dev)
lib.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active))
print(json.dumps({"result": r, "same": cur.value == prim.value, "flags": flags.value, "active": active.value}))
"""
    env = dict(os.environ, **{worker_context.ENV: "0", "KERNELRL_BLOCKING_SYNC": "1"})
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["result"]["retained"] is True and out["result"]["sched"] == "blocking", out
    assert out["same"] and out["active"] == 1 and out["flags"] & worker_context.CU_CTX_SCHED_BLOCKING_SYNC, out


@pytest.mark.gpu
def test_a_spare_reports_its_early_context_and_keeps_blocking_sync(monkeypatch):
    """Through the sandbox: a reference worker (BLOCKING_SYNC) warmed as a spare is: its reply's ``context``
    says the thread retained the context and ``sched`` is blocking; with the switch off (``KERNELRL_EARLY_CONTEXT=0``
    in the parent), no thread, and the flag is set the old way."""
    from kernelrl.evaluation.sandbox import WorkerProcess

    for switch, early in ((None, True), ("0", False)):
        if switch is None:
            monkeypatch.delenv(worker_context.ENV, raising=False)
        else:
            monkeypatch.setenv(worker_context.ENV, switch)
        w = WorkerProcess("ref", device="cuda:0", cache_dir=None, mem_limit_mb=None, drop_privileges=False,
                          blocking_sync=True)
        try:
            h, _ = w.request({"cmd": "warm", "device": "cuda:0", "compiler": False}, timeout=120)
        finally:
            w.close()
        assert h.get("ok") and h["sched"] == "blocking", h
        if early:
            assert h["context"]["retained"] is True and h["context"]["sched"] == "blocking", h
        else:
            assert h["context"] == {}, h


def _spawn_env(**kw) -> dict[str, str]:
    """The environment a sandboxed worker was started with (/proc/PID/environ keeps it: the worker's own pop of the
    variable does not change it), the worker closed again."""
    from kernelrl.evaluation.sandbox import WorkerProcess

    w = WorkerProcess("ref", cache_dir=None, mem_limit_mb=None, drop_privileges=False, **kw)
    try:
        with open(f"/proc/{w.pid}/environ", "rb") as f:
            return dict(e.split("=", 1) for e in f.read().decode().split("\0") if "=" in e)
    finally:
        w.close()


def test_the_sandbox_names_the_device_to_cuda_workers_only_and_precompile_gets_none(monkeypatch):
    """The variable reaches a worker on a CUDA device (no CUDA call happens until a command asks: spawning one on
    this CPU host is safe), never a CPU worker, and not a worker started with early_context=False: the
    pre-build's worker, which loads on the CPU while another job is timed on that GPU (a context there would
    cost the timed job's GPU memory and driver time)."""
    monkeypatch.delenv(worker_context.ENV, raising=False)
    assert _spawn_env(device="cuda:0").get(worker_context.ENV) == "0"
    assert worker_context.ENV not in _spawn_env(device="cpu")
    assert worker_context.ENV not in _spawn_env(device="cuda:0", early_context=False)
    import importlib

    from kernelrl.config.stages import EvalConfig

    pc = importlib.import_module("kernelrl.evaluation.precompile")  # the package's name "precompile" is its function

    seen = {}

    class Refused:
        def __init__(self, *a, **kw):
            seen.update(kw)
            raise TimeoutError("not started (the test looks at its arguments only)")

    monkeypatch.setattr(pc, "WorkerProcess", Refused)
    assert pc.precompile("class ModelNew: pass\n", EvalConfig(device="cpu"), device="cuda:0")["ok"] is False
    assert seen["device"] == "cuda:0" and seen["early_context"] is False


def test_the_parent_records_only_known_keys_of_a_workers_context_report():
    assert worker_context.report({"s": 0.31, "retained": True, "sched": "blocking", "evil": [1] * 9}) == {
        "s": 0.31, "retained": True, "sched": "blocking"}
    assert worker_context.report({"s": "fast", "error": "x" * 999}) == {"error": "x" * 200}
    assert worker_context.report(None) is None and worker_context.report({}) == {}
