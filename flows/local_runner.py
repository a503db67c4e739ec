"""The embedded default's step runner: ``python -m <prefix>.<stage> ...`` as a child process of the flow.

    from flows.local_runner import LocalProcessRunner
    manifest = LocalProcessRunner().run("sft", "smoke", "smoke", {"sft.epochs": "1"}, Path("out/sft.json"))

Streams the step's output through ``flows.runner.StepOutput`` (log file, Prefect logger, console), enforces the
optional timeout (SIGTERM the process group, then SIGKILL), and kills the step when the flow's thread dies.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows import interrupt
from flows.runner import (REPO_ROOT, ProgressFn, StepFailed, StepOutput, check_manifest, exit_failure,
                          stage_logger, step_args, with_log_path)
from flows.stepenv import step_env


@dataclass
class LocalProcessRunner:
    """Each step as a child process: ``<python> -m <module_prefix>.<stage> ...`` in the caller's directory.

    ``module_prefix`` lets tests point the same runner at ``tests.fake_steps``. ``timeout_s`` kills a step that
    runs too long (retryable). ``environ`` is the environment the allow-list is taken from (default: ours).
    """

    module_prefix: str = "steps"
    python: str = field(default_factory=lambda: sys.executable)
    cwd: Path | None = None  # None: the caller's directory, so relative recipe paths, .env and home agree
    timeout_s: float | None = None
    environ: Mapping[str, str] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    kill_grace_s: float = 10.0  # SIGTERM first so a trainer can save; SIGKILL after this many seconds

    def command(self, stage: str, run_name: str, recipe: str, overrides: Mapping[str, Any] | None,
                manifest_out: Path, launcher: list[str] | None = None) -> list[str]:
        """``python -m <prefix>.<stage> ...``; ``launcher`` replaces ``python`` (``accelerate launch ...``)."""
        return [*(launcher or [self.python]), "-m", f"{self.module_prefix}.{stage}",
                *step_args(stage, run_name, recipe, overrides, manifest_out)]

    def gpu_launch(self, stage: str, recipe: str, overrides: Mapping[str, Any] | None
                   ) -> tuple[dict[str, str], list[str] | None]:
        """(environment, launcher) from the recipe's GPU roles (flows/gpu_launch.py): the stage's GPUs visible,
        no in-process evaluation worker beside evaluator GPUs, accelerate for data-parallel stages. ``({}, None)``
        for a recipe without ``gpus:``; a bad GPU layout is a user error (exit 2, not retried)."""
        from flows.gpu_launch import launch_prefix, recipe_of
        from kernelrl.config.gpus import GpuPlan
        from kernelrl.errors import ConfigError

        try:
            recipe_obj = recipe_of(recipe, overrides)
        except Exception:  # noqa: BLE001 - the step itself reports a bad recipe, with its own exit code
            return {}, None
        if not recipe_obj.gpus:
            return {}, None
        environ = os.environ if self.environ is None else self.environ
        try:
            plan = GpuPlan.from_recipe(recipe_obj.gpus, parent_visible=environ.get("CUDA_VISIBLE_DEVICES"))
            return plan.stage_env(stage), launch_prefix(plan, stage, self.python, recipe_obj)
        except ConfigError as e:
            raise StepFailed(stage, str(e), retryable=False, exit_code=2) from None

    def env(self, stage: str) -> dict[str, str]:
        env = step_env(stage, self.environ, extra=self.extra_env)
        # The step imports `steps`/`kernelrl` from the repository whatever the working directory.
        pp = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
        return env

    def run(self, stage: str, run_name: str, recipe: str, overrides: Mapping[str, Any] | None,
            manifest_out: Path, *, on_progress: ProgressFn | None = None,
            log_file: Path | None = None) -> dict[str, Any]:
        logger = stage_logger(stage)
        manifest_out = Path(manifest_out).resolve()
        manifest_out.parent.mkdir(parents=True, exist_ok=True)
        manifest_out.unlink(missing_ok=True)  # never mistake an old manifest for this attempt's
        gpu_env, launcher = self.gpu_launch(stage, recipe, overrides)
        cmd = self.command(stage, run_name, recipe, overrides, manifest_out, launcher)
        logger.info("%s | starting: %s%s", stage, " ".join(cmd[1:]),
                    f" (CUDA_VISIBLE_DEVICES={gpu_env['CUDA_VISIBLE_DEVICES']})" if gpu_env else "")
        out = StepOutput(stage, logger, on_progress, log_file=log_file, header=" ".join(cmd[1:]))
        try:
            return self._run(stage, run_name, cmd, manifest_out, out, logger, gpu_env)
        except StepFailed as e:
            raise with_log_path(e, log_file) from None
        finally:
            out.close()

    def _run(self, stage: str, run_name: str, cmd: list[str], manifest_out: Path, out: StepOutput, logger,
             gpu_env: dict[str, str] | None = None) -> dict[str, Any]:
        try:
            cwd = self.cwd or Path.cwd()
        except FileNotFoundError:  # the flow's directory was deleted under it (a re-synced checkout, on a GPU host)
            raise StepFailed(stage, "the pipeline's working directory no longer exists; start it again from an "
                             "existing directory", retryable=False) from None
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, env={**self.env(stage), **(gpu_env or {})},
                                    stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, bufsize=1,
                                    errors="replace", start_new_session=True, preexec_fn=_die_with_parent)
        except OSError as e:
            raise StepFailed(stage, f"cannot start {cmd[0]}: {e}", retryable=False) from None
        stop_token = interrupt.track(lambda grace_s: interrupt.stop_process_group(proc, grace_s), stage)  # Ctrl-C
        lines: queue.Queue[tuple[str, str | None]] = queue.Queue()

        def pump(stream, name: str) -> None:
            try:
                for line in stream:
                    lines.put((name, line))
            finally:
                lines.put((name, None))

        readers = [threading.Thread(target=pump, args=(proc.stdout, "out"), daemon=True),
                   threading.Thread(target=pump, args=(proc.stderr, "err"), daemon=True)]
        for t in readers:
            t.start()
        deadline = time.monotonic() + self.timeout_s if self.timeout_s else None
        open_streams, timed_out = 2, False
        try:
            while open_streams:
                try:
                    name, line = lines.get(timeout=0.5)
                except queue.Empty:
                    if deadline is not None and time.monotonic() > deadline:
                        timed_out = True
                        self._stop(proc)
                        deadline = None
                    continue
                if line is None:
                    open_streams -= 1
                else:
                    out.line(line, name)
            code = proc.wait()
        finally:
            interrupt.untrack(stop_token)
            if proc.poll() is None:  # cancelled or crashed while streaming: do not leave the step behind
                self._stop(proc)
        if timed_out:
            raise StepFailed(stage, f"timed out after {self.timeout_s:g} s", retryable=True, exit_code=code)
        if code != 0:
            raise exit_failure(stage, code, out.error_hint())
        return check_manifest(stage, run_name, manifest_out, out.manifest_line, logger)

    def _stop(self, proc: subprocess.Popen) -> None:
        """SIGTERM the step's process group, then SIGKILL after ``kill_grace_s``."""
        for sig, wait in ((signal.SIGTERM, self.kill_grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM the step when the runner's thread dies (a SIGKILLed flow run must not
    leave a trainer holding GPUs). Linux only; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass
