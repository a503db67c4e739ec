"""Step runners: launch one pipeline step (``python -m steps.<stage> ...``) and hand back its manifest.

    from flows.runner import LocalProcessRunner, DockerRunner, StepFailed

    runner = LocalProcessRunner()                     # the embedded default: a child process per step
    manifest = runner.run("sft", "smoke", "smoke", {"sft.epochs": "1"}, Path("out/sft.manifest.json"))

    runner = DockerRunner(images={"trainer": "kernelrl/trainer:latest"})
    runner.container_spec("sft", "smoke", "smoke", {}, Path("out/sft.manifest.json"))  # docker-py kwargs

A runner implements ``StepRunner.run(stage, run_name, recipe, overrides, manifest_out) -> manifest`` and
raises ``StepFailed(retryable=...)``: exit status 2 is a user error (bad recipe, missing upstream; retrying
cannot help, ``retryable=False``); any other non-zero status, a signal, a timeout or a missing manifest is
``retryable=True`` and the flow's task retries it with backoff.

Output conventions a step may use on stdout (one per line; everything else is logged as is):

* ``KERNELRL_MANIFEST {json}`` - the manifest, last line (``kernelrl.step.write_manifest`` prints it).
* ``KERNELRL_PROGRESS <fraction> [message]`` - progress of a long stage, ``fraction`` in [0, 1]
  (e.g. ``KERNELRL_PROGRESS 0.25 step 2/8``). The flow turns these into a Prefect progress artifact;
  ``kernelrl.training.stages.progress`` prints them.

What reaches where: every line of a step goes to its log file (``log_file``; the flow passes
``<home>/runs/<run>/logs/<stage>.log``) and to the Prefect run logger (the UI keeps the whole output). The
``kernelrl.console`` logger gets only what a person watching a run needs: progress lines and the step's own
warnings and errors (``kernelrl pipeline run`` prints that logger and quiets Prefect's console handler).

The environment a step sees is an allow-list (``step_env``): ``KERNELRL_*`` settings, PATH/HOME/locale,
offline Hugging Face switches, thread counts, ``VLLM_*``/``NCCL_*`` tuning. A variable whose name looks like a
secret (``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``) passes only to the stages listed for it in
``STAGE_SECRETS`` (the LLM API key to augment, S3 keys to stages that use checkpoints). Nothing else leaks
(no ``PREFECT_API_KEY``, no cloud credentials of the orchestrator).

Containers (``DockerRunner``) always use ``network_mode="host"``: these machines flag traffic to private
ranges, and Docker's default bridge is one (172.17.0.0/16); host networking also lets a step reach the store
and MinIO on 127.0.0.1. GPUs are pinned by UUID (``DeviceRequest(device_ids=["GPU-..."])``).

Modules: this one (the contract: ``StepFailed``, output conventions, ``make_runner``), ``flows.local_runner``,
``flows.docker_runner`` (images, GPU pinning by UUID) and ``flows.stepenv`` (the environment allow-list).

Kubernetes is not built here: run the per-stage flows as deployments on a Prefect ``kubernetes`` work pool
(see infra/README.md) and each flow run becomes a Job; inside it use ``LocalProcessRunner``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

MANIFEST_MARKER = "KERNELRL_MANIFEST "
CONSOLE = logging.getLogger("kernelrl.console")  # the short per-stage lines a person follows a run by
# A step's own warnings and errors (its logging format is "<time> <stage> LEVEL message"; one-line user errors
# start with "error:"); library chatter (FutureWarning and friends) stays in the log file.
_NOTABLE = re.compile(r"^\S+ \S+ \S+ (WARNING|ERROR|CRITICAL) |^error: ")
PROGRESS_MARKER = "KERNELRL_PROGRESS "
REPO_ROOT = Path(__file__).resolve().parents[1]

ProgressFn = Callable[[float, str], None]

class StepFailed(Exception):
    """A step did not produce a manifest. ``retryable`` says whether running it again can help."""

    def __init__(self, stage: str, message: str, *, retryable: bool, exit_code: int | None = None):
        super().__init__(f"step {stage}: {message}")
        self.stage = stage
        self.retryable = retryable
        self.exit_code = exit_code

    def __reduce__(self):  # picklable with its keywords (Prefect persists and ships exceptions)
        return (_rebuild_step_failed, (self.stage, str(self), self.retryable, self.exit_code))


def _rebuild_step_failed(stage: str, text: str, retryable: bool, exit_code: int | None) -> StepFailed:
    e = StepFailed(stage, "", retryable=retryable, exit_code=exit_code)
    e.args = (text,)
    return e


class StepRunner(Protocol):
    def run(self, stage: str, run_name: str, recipe: str, overrides: Mapping[str, Any] | None,
            manifest_out: Path, *, on_progress: ProgressFn | None = None,
            log_file: Path | None = None) -> dict[str, Any]:
        """Run one step to completion; return its manifest or raise ``StepFailed``. Every output line is
        appended to ``log_file`` when given."""
        ...


# -- shared pieces -------------------------------------------------------------------------------------------
def step_args(stage: str, run_name: str, recipe: str, overrides: Mapping[str, Any] | None,
              manifest_out: str | os.PathLike) -> list[str]:
    """The step's own arguments (after ``python -m <prefix>.<stage>``)."""
    args = ["--recipe", str(recipe), "--run", run_name, "--manifest-out", os.fspath(manifest_out)]
    for key, value in (overrides or {}).items():
        args += ["--set", f"{key}={_override_text(value)}"]
    return args


def _override_text(value: Any) -> str:
    """``--set`` values are YAML: strings pass through as typed on the command line; others are dumped."""
    if isinstance(value, str):
        return value
    return json.dumps(value)  # JSON is YAML: lists, dicts, numbers, true/false round-trip


def stage_logger(stage: str) -> logging.Logger | logging.LoggerAdapter:
    """Prefect's run logger when called inside a flow or task run, else ``kernelrl.steps.<stage>``."""
    try:
        from prefect.context import FlowRunContext, TaskRunContext
        from prefect.logging import get_run_logger

        if TaskRunContext.get() or FlowRunContext.get():
            return get_run_logger()
    except Exception:  # prefect missing or no run context
        pass
    return logging.getLogger(f"kernelrl.steps.{stage}")


class StepOutput:
    """Consumes a step's output lines: logs them, captures the manifest, parses progress, keeps a tail."""

    def __init__(self, stage: str, logger, on_progress: ProgressFn | None, tail: int = 30,
                 log_file: Path | None = None, header: str = ""):
        self.stage = stage
        self.logger = logger
        self.on_progress = on_progress
        self.manifest_line: dict[str, Any] | None = None
        self.tail: deque[str] = deque(maxlen=tail)
        self.log_file = Path(log_file) if log_file else None
        self._fh = None
        if self.log_file is not None:
            try:
                self.log_file.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.log_file, "a", buffering=1, errors="replace")
                self._fh.write(f"===== {time.strftime('%Y-%m-%d %H:%M:%S')} {header}\n")
            except OSError as e:  # a full or read-only disk must not fail the step: the UI still has the lines
                self.logger.warning("%s | cannot write the log file %s: %s", stage, self.log_file, e)
                self._fh = None

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def line(self, text: str, stream: str = "out") -> None:
        text = text.rstrip("\r\n")
        if self._fh is not None:
            try:
                self._fh.write(("! " if stream == "err" else "") + text + "\n")
            except OSError:
                self._fh = None
        if text.startswith(MANIFEST_MARKER):
            try:
                self.manifest_line = json.loads(text[len(MANIFEST_MARKER):])
            except ValueError:
                self.logger.warning("%s: unparsable manifest line", self.stage)
            self.logger.info("%s | manifest received", self.stage)
            return
        if text.startswith(PROGRESS_MARKER):
            parts = text[len(PROGRESS_MARKER):].strip().split(None, 1)
            try:
                frac = min(max(float(parts[0]), 0.0), 1.0)
            except (ValueError, IndexError):
                self.logger.warning("%s | bad progress line: %s", self.stage, text)
                return
            msg = parts[1] if len(parts) > 1 else ""
            self.logger.info("%s | progress %.0f%% %s", self.stage, frac * 100, msg)
            CONSOLE.info("%-8s %3.0f%% %s", self.stage, frac * 100, msg)
            if self.on_progress is not None:
                try:
                    self.on_progress(frac, msg)
                except Exception as e:  # a UI artifact must never fail the step
                    self.logger.warning("%s | progress callback failed: %s", self.stage, e)
            return
        self.tail.append(text)
        self.logger.info("%s%s %s", self.stage, " !" if stream == "err" else " |", text)
        if _NOTABLE.search(text):
            CONSOLE.warning("%-8s ! %s", self.stage, text)

    def error_hint(self) -> str:
        """The most telling recent line (a step's one-line ``error: ...``), else the last line."""
        for t in reversed(self.tail):
            if t.startswith("error:") or "Error" in t:
                return t.strip()[:500]
        return self.tail[-1].strip()[:500] if self.tail else ""


def check_manifest(stage: str, run_name: str, path: Path | None, from_stdout: dict[str, Any] | None,
                   logger) -> dict[str, Any]:
    """The manifest of a step that exited 0: the file (written atomically), else the stdout line."""
    manifest = None
    if path is not None and path.exists():
        try:
            manifest = json.loads(path.read_text())
        except ValueError as e:
            raise StepFailed(stage, f"manifest {path} is not valid JSON ({e})", retryable=True) from None
    elif from_stdout is not None:
        logger.warning("%s: manifest file %s missing; using the manifest printed on stdout", stage, path)
        manifest = from_stdout
    if not isinstance(manifest, dict):
        raise StepFailed(stage, "exited 0 without writing a manifest", retryable=True, exit_code=0)
    if manifest.get("stage") != stage or manifest.get("run") != run_name:
        raise StepFailed(stage, f"manifest is for stage {manifest.get('stage')!r} of run {manifest.get('run')!r}, "
                         f"expected {stage!r} of {run_name!r}", retryable=False, exit_code=0)
    if manifest.get("status", "done") != "done":
        raise StepFailed(stage, f"manifest status is {manifest.get('status')!r}", retryable=True, exit_code=0)
    return manifest


def exit_failure(stage: str, code: int, hint: str) -> StepFailed:
    """Map an exit status to StepFailed: 2 = user error (not retried), anything else retryable."""
    tail = f": {hint}" if hint else ""
    if code == 2:
        return StepFailed(stage, f"user error (exit 2){tail}", retryable=False, exit_code=code)
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return StepFailed(stage, f"killed by signal {name}{tail}", retryable=True, exit_code=code)
    if code >= 128 and code - 128 in {s.value for s in signal.Signals}:  # containers report 128+signal
        return StepFailed(stage, f"exit {code} (signal {signal.Signals(code - 128).name}){tail}", retryable=True,
                          exit_code=code)
    return StepFailed(stage, f"exit {code}{tail}", retryable=True, exit_code=code)


def with_log_path(e: StepFailed, log_file: Path | None) -> StepFailed:
    """The failure with where its whole output is (the message carries only the most telling line)."""
    if log_file is not None and "full log:" not in str(e):
        e.args = (f"{e} (full log: {log_file})",)
    return e


def make_runner(kind: str = "local", *, module_prefix: str = "steps", **options: Any) -> StepRunner:
    """A runner by name: ``local`` (default) or ``docker``; ``options`` go to its constructor."""
    if kind == "local":
        from flows.local_runner import LocalProcessRunner

        return LocalProcessRunner(module_prefix=module_prefix, **options)
    if kind == "docker":
        from flows.docker_runner import DockerRunner

        return DockerRunner(module_prefix=module_prefix, **options)
    from kernelrl.errors import ConfigError

    raise ConfigError(f"runner {kind!r}: expected local or docker")


# The runners and the environment allow-list live in their own modules; ``from flows.runner import X`` keeps
# working for all of them (loaded on first use: the Docker runner imports docker-py).
_ELSEWHERE = {
    "LocalProcessRunner": "flows.local_runner",
    "DockerRunner": "flows.docker_runner", "augment_uses_vllm": "flows.docker_runner",
    "nvidia_smi_uuids": "flows.docker_runner", "resolve_gpu_uuids": "flows.docker_runner",
    "DEFAULT_IMAGES": "flows.docker_runner", "STAGE_IMAGE_ROLE": "flows.docker_runner",
    "STAGE_GPU_ROLE": "flows.docker_runner",
    "step_env": "flows.stepenv", "settings_env": "flows.stepenv", "STAGE_SECRETS": "flows.stepenv",
    "PASS_NAMES": "flows.stepenv", "PASS_PREFIXES": "flows.stepenv",
}


def __getattr__(name: str):
    if name in _ELSEWHERE:
        import importlib

        return getattr(importlib.import_module(_ELSEWHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
