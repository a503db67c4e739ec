"""The evaluator fleet of a local pipeline run on a GPU host: one ``kernelrl worker --device cuda:N`` process per
GPU the recipe's ``gpus.evaluate`` names, pulling jobs from the store's queue while the stages run.

    with fleet_for("gpu-smoke", overrides, run="r1", runner="local") as fleet:   # None-safe: a no-op without GPUs
        ...  # the stages' evaluation services submit jobs with KERNELRL_EVAL_LOCAL_WORKERS=0
    fleet.workers   # [{"device": "cuda:1", "pid": 4242, "log": ".../logs/evaluator-cuda1.log"}, ...]

Each worker logs to ``<home>/runs/<run>/logs/evaluator-cuda<N>-<i>.log``; ``<home>/runs/<run>/fleet.json`` lists
them (device, pid, log) so an operator or a fault test can find one. A worker that dies is not restarted here:
its job's lease lapses and another worker of the fleet takes it over (the queue's guarantee). ``KERNELRL_FLEET=
external`` leaves the fleet to the operator (``kernelrl workers up --gpus ...`` or evaluator containers);
the Docker runner never starts one (its evaluators are the infrastructure's, infra/).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flows.runner import REPO_ROOT
from flows.stepenv import step_env

FLEET_ENV = "KERNELRL_FLEET"  # auto (default): the local runner starts the fleet; external: someone else does


class EvaluatorFleet:
    """Worker processes on ``devices`` (``cuda:N`` as this process numbers its GPUs) for one run."""

    def __init__(self, devices: list[str], run: str, home: Path, *, environ: Mapping[str, str] | None = None,
                 python: str | None = None, lease_s: float = 30.0, reverify_wait_s: float = 30.0,
                 grace_s: float = 60.0, extra_args: tuple[str, ...] = ()):
        self.devices, self.run, self.home = list(devices), run, Path(home)
        self.environ = os.environ if environ is None else environ
        self.python = python or sys.executable
        # lease: a killed worker's job is claimed again this long after its last heartbeat; reverify_wait_s: a
        # suspicious speedup waits this long for ANOTHER GPU of the fleet before its own worker re-measures it
        # (with >= 2 evaluator GPUs an idle one takes it at once); grace_s: on stop, a running evaluation may
        # finish within this, else it is released to the queue
        self.lease_s, self.reverify_wait_s, self.grace_s = lease_s, reverify_wait_s, grace_s
        self.extra_args = tuple(extra_args)  # more `kernelrl worker` options (tests: a fake --evaluate-fn)
        self.procs: list[subprocess.Popen] = []
        self.workers: list[dict[str, Any]] = []

    @property
    def run_dir(self) -> Path:
        return self.home / "runs" / self.run

    def env(self) -> dict[str, str]:
        env = step_env("bench", self.environ)  # the allow-list a step gets (KERNELRL_* settings, caches, GPUs)
        env.pop("KERNELRL_EVAL_LOCAL_WORKERS", None)
        pp = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
        return env

    def start(self) -> EvaluatorFleet:
        logs = self.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = self.env()
        for d in self.devices:
            log_path = logs / f"evaluator-{d.replace(':', '')}-{len(self.procs)}.log"
            cmd = [self.python, "-m", "kernelrl.cli", "worker", "--device", d, "--lease-s", str(self.lease_s),
                   "--reverify-wait-s", str(self.reverify_wait_s), "--grace-s", str(self.grace_s),
                   "--worker-id", f"{os.uname().nodename}:{self.run}:{d}:{len(self.procs)}", *self.extra_args]
            with open(log_path, "ab") as log:
                p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, preexec_fn=_die_with_parent, cwd=REPO_ROOT)
            self.procs.append(p)
            self.workers.append({"device": d, "pid": p.pid, "log": str(log_path),
                                 "worker_id": cmd[cmd.index("--worker-id") + 1]})
        self._write()
        return self

    def alive(self) -> list[str]:
        return [w["device"] for w, p in zip(self.workers, self.procs) if p.poll() is None]

    def _write(self) -> None:
        data = {"run": self.run, "started": time.time(), "workers": [
            {**w, "returncode": p.poll()} for w, p in zip(self.workers, self.procs)]}
        (self.run_dir / "fleet.json").write_text(json.dumps(data, indent=1))

    def stop(self) -> None:
        """SIGTERM every worker (each finishes or releases its job), SIGKILL whatever is left after grace_s."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        if self.workers:
            self._write()

    def __enter__(self) -> EvaluatorFleet:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def fleet_for(recipe: str, overrides: Mapping[str, Any] | None, run: str, runner: str = "local",
              environ: Mapping[str, str] | None = None) -> EvaluatorFleet | None:
    """A started fleet for a local run of a recipe that names evaluator GPUs; None otherwise (no GPUs named,
    the Docker runner, or ``KERNELRL_FLEET=external``)."""
    environ = os.environ if environ is None else environ
    mode = environ.get(FLEET_ENV, "auto")
    if mode not in ("auto", "external"):
        from kernelrl.errors import ConfigError

        raise ConfigError(f"{FLEET_ENV} must be auto or external, got {mode!r}")
    if runner != "local" or mode == "external":
        return None
    from flows.gpu_launch import plan_for
    from kernelrl.config.settings import load_settings

    plan = plan_for(recipe, overrides)
    if plan is None or not plan.evaluate:
        return None
    return EvaluatorFleet([f"cuda:{i}" for i in plan.evaluate], run, load_settings().home,
                          environ=environ).start()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM the worker when the flow's process dies (no orphan holding a GPU)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass
